package dev.tpcomm.coroutines.local

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorded
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.engine.DeadlineWatchdog
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeGreaterThanOrEqual
import io.kotest.matchers.longs.shouldBeLessThanOrEqual
import io.kotest.matchers.nulls.shouldBeNull
import io.kotest.matchers.nulls.shouldNotBeNull
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.delay

/**
 * The in-process backend's flight recorder reads no clock per call by default, as the MPI backend's
 * does without profiling (issue 37: two clock reads per rank were about a fifth of an 8-byte
 * all-reduce of 4 ranks on one thread), and says so in its dumps; `local.timing=true` brings exact
 * start times and completion durations back.
 */
class LocalRecorderTimingSpec : FunSpec({
    fun recorder(comm: dev.tpcomm.Communicator): FlightRecorder = (comm as FlightRecorded).flightRecorder

    test("by default: start times to the watchdog's 50 ms, stated in the dump; completed calls carry no duration") {
        runLocalWorld(2) { comm ->
            val t = Tensor.of(floatArrayOf(1f, 2f))
            val before = System.currentTimeMillis() * 1000
            comm.allReduce(t)
            val after = System.currentTimeMillis() * 1000
            val dump = FlightRecorder.parseDump(recorder(comm).dumpJson())
            // The watchdog's period, or the longest step the machine made its clock take (never less, never decreasing).
            dump.clockResolutionMicros shouldBeGreaterThanOrEqual 50_000L
            dump.clockResolutionMicros shouldBeLessThanOrEqual DeadlineWatchdog.coarseClock.resolutionMicros
            val record = dump.entries.last()
            record.operation shouldBe "allReduce"
            record.durationMicros.shouldBeNull()
            record.completedEpochMicros.shouldBeNull()
            // The start is the watchdog's latest scan: never after the call, at most about 50 ms before it.
            record.startedEpochMicros shouldBeLessThanOrEqual after + 1_000
            record.startedEpochMicros shouldBeGreaterThanOrEqual before - 50_000 - 200_000 // the scan may run late on a loaded machine
            t.close()
        }
    }

    test("local.timing=true: exact start times and completion durations") {
        val config = CommConfig(options = mapOf(LocalBackendFactory.TIMING_OPTION to "true"))
        runLocalWorld(2, config) { comm ->
            val t = Tensor.zeros(DType.Float32, 2)
            if (comm.rank == 1) delay(30)
            val before = System.currentTimeMillis() * 1000
            comm.allReduce(t)
            val dump = FlightRecorder.parseDump(recorder(comm).dumpJson())
            dump.clockResolutionMicros shouldBe 0L
            val record = dump.entries.last()
            record.completedEpochMicros.shouldNotBeNull()
            // Rank 0 waited for rank 1's 30 ms: its record's duration shows the wait.
            if (comm.rank == 0) record.durationMicros.shouldNotBeNull() shouldBeGreaterThanOrEqual 20_000L
            else record.startedEpochMicros shouldBeGreaterThanOrEqual before - 2_000
            t.close()
        }
    }

    test("a failed call carries its failure time with the default clock too") {
        val config = CommConfig(timeout = kotlin.time.Duration.parse("300ms"))
        val world = LocalWorld(2, config)
        try {
            val comm = world.communicator(0)
            val t = Tensor.zeros(DType.Float32, 2)
            shouldThrow<dev.tpcomm.CommunicationTimeoutException> { comm.allReduce(t) }
            val record = FlightRecorder.parseDump(recorder(comm).dumpJson()).entries.last()
            record.state shouldBe FlightRecorder.State.Failed
            record.completedEpochMicros.shouldNotBeNull()
            record.durationMicros.shouldNotBeNull() shouldBeGreaterThanOrEqual 250_000L
            t.close()
        } finally {
            world.close()
        }
    }

    test("the option refuses a value that is not a boolean, saying what it accepts") {
        shouldThrow<IllegalArgumentException> {
            LocalWorld(2, CommConfig(options = mapOf("local.timing" to "yes")))
        }.message shouldBe "option local.timing=\"yes\" is not a boolean; use true or false"
    }
})
