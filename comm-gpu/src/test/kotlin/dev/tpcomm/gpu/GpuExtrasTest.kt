package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.STREAM
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.mockk.verify

/** The GPU engine's extras reached from a plain [Communicator], as `Comm.create` returns it: no cast to the engine's class. */
class GpuExtrasTest : FunSpec({
    test("producerStream and waitEvent on a Communicator of the GPU engine are the engine's") {
        val p = MockPlatform()
        val comm: Communicator = p.connect()
        comm.producerStream = 77L
        comm.producerStream shouldBe 77L
        (comm as NcclCommunicator).producerStream shouldBe 77L
        comm.waitEvent(0x1234L)
        verify(exactly = 1) { p.runtime.streamWaitEvent(STREAM, 0x1234L) }
        comm.allReduce(dev(A, DType.Float32, 1))
        comm.close()
    }

    test("on another backend's communicator they fail with what to change, and nothing is recorded") {
        runLocalWorld(1, CommConfig(worldSize = 1)) { comm ->
            val e = shouldThrow<IllegalArgumentException> { comm.waitEvent(1L) }
            e.message!! shouldContain "waitEvent is an extra of the GPU engine"
            e.message!! shouldContain "local"
            shouldThrow<IllegalArgumentException> { comm.producerStream = 1L }.message!! shouldContain "producerStream"
            (comm as dev.tpcomm.coroutines.FlightRecorded).flightRecorder.snapshot().size shouldBe 0
        }
    }
})
