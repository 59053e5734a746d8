package dev.tpcomm.coroutines

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext

/** The uneven collectives in the flight recorder, and their mismatch messages, on the local backend. */
class UnevenFlightRecordSpec : FunSpec({
    test("allGatherV, reduceScatterV and allToAllV are flight-recorded under their names with this rank's input") {
        val records = withContext(Dispatchers.Default) {
            runLocalWorld(2, CommConfig(worldSize = 2)) { comm ->
                val me = comm.rank
                comm.allGatherV(Tensor.zeros(DType.Float32, me + 1, 3), listOf(1, 2))
                comm.reduceScatterV(Tensor.zeros(DType.Float32, 3, 3), listOf(2, 1))
                comm.allToAllV(Tensor.zeros(DType.Float32, 2, 3), listOf(1, 1), listOf(1, 1))
                (comm as FlightRecorded).flightRecorder.snapshot()
            }
        }
        for ((rank, list) in records.withIndex()) {
            list.map { it.operation } shouldContainExactly listOf("allGatherV", "reduceScatterV", "allToAllV")
            list[0].shape shouldBe listOf(rank + 1, 3)
            list.map { it.outcome } shouldContainExactly List(3) { FlightRecorder.Outcome.Ok }
        }
    }

    test("splits that disagree fail every rank with a mismatch naming sizes and the peer") {
        val errors = withContext(Dispatchers.Default) {
            runLocalWorld(3, CommConfig(worldSize = 3)) { comm ->
                val outputSplits = if (comm.rank == 2) listOf(1, 1, 2) else listOf(1, 1, 1)
                shouldThrow<CollectiveMismatchException> { comm.allToAllV(Tensor.zeros(DType.Int32, 3, 2), listOf(1, 1, 1), outputSplits) }
            }
        }
        for (e in errors) {
            e.fields shouldContainExactly listOf("sizes")
            e.ranks shouldContainExactly listOf(2)
            e.message!! shouldContain "outputSplits[2] differs from the rows rank 2 sends it"
        }
    }
})
