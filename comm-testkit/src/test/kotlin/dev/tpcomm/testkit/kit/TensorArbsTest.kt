package dev.tpcomm.testkit.kit

import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.testkit.dtype
import dev.tpcomm.testkit.rank
import dev.tpcomm.testkit.shape
import dev.tpcomm.testkit.tensor
import dev.tpcomm.testkit.worldSize
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainAll
import io.kotest.matchers.ints.shouldBeInRange
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.property.Arb
import io.kotest.property.RandomSource
import io.kotest.property.arbitrary.take
import io.kotest.property.checkAll

class TensorArbsTest : FunSpec({
    test("Arb.tensor gives host tensors of the generated dtype and shape, values in range") {
        val dtypes = mutableSetOf<DType>()
        checkAll(300, Arb.tensor(shape = Arb.shape(ndim = 1..3, dim = 1..5), floats = -1.0..1.0, ints = -3L..3L)) { t ->
            dtypes += t.dtype
            t.device shouldBe Device.Host
            t.ndim shouldBeInRange 1..3
            t.shape.forEach { it shouldBeInRange 1..5 }
            for (i in 0 until t.numel) {
                if (t.dtype.isFloatingPoint) (t.getDouble(i) in -1.0..1.0) shouldBe true
                else if (t.dtype == DType.UInt8) (t.getLong(i) in 0L..3L) shouldBe true
                else (t.getLong(i) in -3L..3L) shouldBe true
            }
        }
        dtypes shouldContainAll DType.entries
    }

    test("integer tensors cover the dtype's whole range by default; the same seed gives the same tensor") {
        val big = Arb.tensor(DType.Int64, listOf(1000)).take(1, RandomSource.seeded(7)).single()
        (0 until big.numel).any { big.getLong(it) > Int.MAX_VALUE.toLong() } shouldBe true
        (0 until big.numel).any { big.getLong(it) < Int.MIN_VALUE.toLong() } shouldBe true
        val again = Arb.tensor(DType.Int64, listOf(1000)).take(1, RandomSource.seeded(7)).single()
        again.contentEquals(big) shouldBe true
        val bf = Arb.tensor(DType.BFloat16, listOf(4, 4), floats = 0.5..0.75).take(1, RandomSource.seeded(1)).single()
        bf.shape shouldBe listOf(4, 4)
        (0 until bf.numel).all { bf.getDouble(it) in 0.5..0.75 } shouldBe true
    }

    test("Arb.dtype, Arb.worldSize and Arb.rank stay in their ranges and shrink toward the smallest") {
        Arb.dtype(listOf(DType.Float16, DType.Int8)).take(50, RandomSource.seeded(3)).toSet() shouldBe setOf(DType.Float16, DType.Int8)
        checkAll(200, Arb.worldSize(2..6)) { n ->
            n shouldBeInRange 2..6
            checkAll(5, Arb.rank(n)) { r -> r shouldBeInRange (0 until n) }
        }
        val sample = Arb.worldSize(2..64).sample(RandomSource.seeded(11))
        sample.shrinks.children.value.forEach { it.value() shouldBeInRange 2..sample.value }
    }

    test("bad ranges are refused with a message that says what to pass") {
        shouldThrow<IllegalArgumentException> { Arb.worldSize(0..4) }.message shouldContain "counts >= 1"
        shouldThrow<IllegalArgumentException> { Arb.rank(0) }.message shouldContain "worldSize must be >= 1"
        shouldThrow<IllegalArgumentException> { Arb.tensor(floats = 1.0..Double.POSITIVE_INFINITY) }.message shouldContain "finite"
    }
})
