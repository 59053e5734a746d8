@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.coroutines

import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.engine.CommunicatorCreation
import dev.tpcomm.spi.CommunicationErrors
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.delay
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicReference
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** A creation's deadline runs from its construction, and its failures carry the one naming convention (create, no sequence). */
class CommunicatorCreationTest : FunSpec({
    test("a step that never returns ends at the creation's deadline, counted from construction, with the late result handed to no one") {
        val creation = CommunicatorCreation(3, "mpi", 400.milliseconds)
        delay(200) // time spent before the step (e.g. a bootstrap) counts
        val seen = AtomicReference<CommunicationTimeoutException>()
        val release = CountDownLatch(1)
        val start = System.nanoTime()
        val e = shouldThrow<CommunicationTimeoutException> {
            creation.onOwnThread("test-create", lateMessage = { "init waits for a rank that never came" }, beforeThrow = { seen.set(it) }) {
                release.await(5, TimeUnit.SECONDS)
                "made too late"
            }
        }
        val ms = (System.nanoTime() - start) / 1_000_000
        release.countDown()
        ms shouldBeLessThan 400 // only what was left of the 400 ms
        seen.get() shouldBe e
        e.rank shouldBe 3
        e.backend shouldBe "mpi"
        e.operation shouldBe CommunicationErrors.CREATE
        e.sequenceNumber shouldBe CommunicationErrors.NO_SEQUENCE
        e.message!! shouldContain "init waits for a rank that never came"
    }

    test("a step that completes in time returns its result; its own failure is rethrown as it is; no limit waits as long as it takes") {
        CommunicatorCreation(0, "nccl", 5.seconds).onOwnThread("test-create", { "late" }) { 42 } shouldBe 42
        shouldThrow<IllegalStateException> {
            CommunicatorCreation(0, "nccl", 5.seconds).onOwnThread<Int>("test-create", { "late" }) { error("MPI refused the duplicate") }
        }.message shouldBe "MPI refused the duplicate"
        val unlimited = CommunicatorCreation(0, "nccl", Duration.INFINITE)
        unlimited.deadlinePassed() shouldBe false
        unlimited.onOwnThread("test-create", { "late" }) { delay(300); "slow but fine" } shouldBe "slow but fine"
    }

    test("a native failure and an interruption are named create, with no sequence number") {
        val creation = CommunicatorCreation(1, "rccl", 1.seconds)
        val n = creation.nativeFailure("hipSetDevice(1) failed with error 101", 101, isRuntimeError = true)
        n.operation shouldBe CommunicationErrors.CREATE
        n.sequenceNumber shouldBe CommunicationErrors.NO_SEQUENCE
        n.result shouldBe 101
        n.isRuntimeError shouldBe true
        val i = creation.interrupted("interrupted while creating the communicator", InterruptedException())
        i.operation shouldBe CommunicationErrors.CREATE
        i.rank shouldBe 1
    }
})
