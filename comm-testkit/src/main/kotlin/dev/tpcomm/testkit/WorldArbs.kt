package dev.tpcomm.testkit

import io.kotest.property.Arb
import io.kotest.property.arbitrary.int

/**
 * Kotest generators of world sizes (numbers of ranks) in [sizes] (default 1 to 8), shrinking
 * toward the smallest: a failing property is reported on the smallest world that shows it.
 */
public fun Arb.Companion.worldSize(sizes: IntRange = 1..8): Arb<Int> {
    require(!sizes.isEmpty() && sizes.first >= 1) { "Arb.worldSize: sizes must be a non-empty range of counts >= 1, got $sizes" }
    return Arb.int(sizes)
}

/**
 * Kotest generators of ranks of a world of [worldSize] ranks (`0 until worldSize`), for roots,
 * peers and "the rank that differs". Shrinks toward rank 0.
 */
public fun Arb.Companion.rank(worldSize: Int): Arb<Int> {
    require(worldSize >= 1) { "Arb.rank: worldSize must be >= 1, got $worldSize" }
    return Arb.int(0 until worldSize)
}
