package dev.tpcomm.coroutines.async

import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope

/** Runs [block] once per rank of a fresh [FakeWorld] of [size], concurrently, and returns the results in rank order. */
suspend fun <R> fakeWorld(size: Int, block: suspend CoroutineScope.(FakeComm) -> R): List<R> = coroutineScope {
    FakeWorld(size).communicators().map { c -> async { block(c) } }.awaitAll()
}

/** A test whose body runs in [kotlinx.coroutines.test.runTest]: delays and timeouts use virtual time, so they take no real time. */
fun io.kotest.core.spec.style.FunSpec.vtest(name: String, block: suspend kotlinx.coroutines.test.TestScope.() -> Unit) {
    test(name) { kotlinx.coroutines.test.runTest(testBody = block) }
}
