package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.allGatherObject
import dev.tpcomm.broadcastObject
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlin.time.Duration.Companion.seconds

/**
 * Object collectives when a peer sends what the protocol does not allow (a peer running another
 * version, or calling a tensor collective at that position): every such case is a
 * CommunicationException naming this rank, the operation, the peer and what it sent, never a raw
 * NegativeArraySizeException / IndexOutOfBoundsException / SerializationException.
 */
class ObjectCollectivesPeerSpec : FunSpec({
    val config = CommConfig(timeout = 10.seconds)

    test("allGatherObject: a peer's negative length is a CommunicationException naming rank, operation and length").config(timeout = 30.seconds) {
        val e = shouldThrow<CommunicationException> {
            runLocalWorld(2, config) { comm ->
                if (comm.rank == 0) {
                    comm.allGatherObject("hello")
                } else {
                    comm.allGather(Tensor.of(longArrayOf(-5)))
                    comm.allGather(Tensor.zeros(DType.UInt8, 7))
                }
            }
        }
        e.rank shouldBe 0
        e.operation shouldBe "allGatherObject"
        e.message shouldContain "rank 1"
        e.message shouldContain "-5"
    }

    test("allGatherObject: a peer's length beyond what a value can have is refused, not truncated to an Int").config(timeout = 30.seconds) {
        val e = shouldThrow<CommunicationException> {
            runLocalWorld(2, config) { comm ->
                if (comm.rank == 0) {
                    comm.allGatherObject(listOf(1, 2, 3))
                } else {
                    comm.allGather(Tensor.of(longArrayOf(1L shl 40)))
                    comm.allGather(Tensor.zeros(DType.UInt8, 7))
                }
            }
        }
        e.operation shouldBe "allGatherObject"
        e.message shouldContain "rank 1"
        e.message shouldContain "${1L shl 40}"
    }

    test("broadcastObject: the root's negative length is a CommunicationException on the receivers").config(timeout = 30.seconds) {
        val e = shouldThrow<CommunicationException> {
            runLocalWorld(2, config) { comm ->
                if (comm.rank == 0) {
                    comm.broadcast(Tensor.of(longArrayOf(-1)), 0)
                    comm.barrier()
                } else {
                    comm.broadcastObject<String>(null, 0)
                }
            }
        }
        e.rank shouldBe 1
        e.operation shouldBe "broadcastObject"
        e.message shouldContain "root rank 0"
        e.message shouldContain "-1"
    }

    test("allGatherObject: a peer's bytes that do not decode are a CommunicationException naming the rank").config(timeout = 30.seconds) {
        val e = shouldThrow<CommunicationException> {
            runLocalWorld(2, config) { comm ->
                if (comm.rank == 0) {
                    comm.allGatherObject(12345)
                } else {
                    comm.allGather(Tensor.of(longArrayOf(5)))
                    comm.allGather(Tensor.zeros(DType.UInt8, 5).also { it.segment.fill('{'.code.toByte()) })
                }
            }
        }
        e.operation shouldBe "allGatherObject"
        e.message shouldContain "rank 1"
    }
})
