package dev.tpcomm.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.coroutines.FlightRecorded
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/** The MPI backend's duplicate on a plain Communicator: on another backend it says what to use instead, and records nothing. */
class MpiExtrasTest : FunSpec({
    test("duplicate on another backend's communicator fails with what to use instead, and nothing is recorded") {
        runLocalWorld(1, CommConfig(worldSize = 1)) { comm ->
            val e = shouldThrow<IllegalArgumentException> { comm.duplicate() }
            e.message!! shouldContain "duplicate is an extra of the MPI backend"
            e.message!! shouldContain "split(color = 0, key = rank)"
            (comm as FlightRecorded).flightRecorder.snapshot().size shouldBe 0
        }
    }
})
