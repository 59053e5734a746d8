package dev.tpcomm.coroutines

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import kotlinx.coroutines.withTimeoutOrNull
import kotlin.time.Duration.Companion.seconds

/**
 * [callerMayBeHeld] on the contexts users call from, with the kotlinx.coroutines version in use:
 * its `withTimeout` is recognised by the class of its job, so a change there fails here.
 */
class CallerMayBeHeldTest : FunSpec({
    suspend fun mayBeHeld() = callerMayBeHeld(currentCoroutineContext())

    test("a plain runBlocking main, a launched child and a coroutineScope may be held") {
        runBlocking {
            mayBeHeld() shouldBe true
            launch { mayBeHeld() shouldBe true }.join()
            coroutineScope { mayBeHeld() shouldBe true }
        }
    }

    test("under withTimeout or withTimeoutOrNull, however deep, the caller is not held") {
        runBlocking {
            withTimeout(10.seconds) { mayBeHeld() } shouldBe false
            withTimeoutOrNull(10.seconds) { mayBeHeld() } shouldBe false
            withTimeout(10.seconds) { coroutineScope { async { launch { mayBeHeld() shouldBe false } } } }.await()
        }
    }

    test("Overlapping, startCollective and overlap's communication are not held") {
        runBlocking {
            async(Overlapping, start = CoroutineStart.UNDISPATCHED) { mayBeHeld() }.await() shouldBe false
            startCollective { mayBeHeld() }.await() shouldBe false
            overlap({ mayBeHeld() }, { 1 }).first shouldBe false
            pipeline(2, compute = { it }, communicate = { _, _ -> mayBeHeld() }) shouldBe listOf(false, false)
        }
    }
})
