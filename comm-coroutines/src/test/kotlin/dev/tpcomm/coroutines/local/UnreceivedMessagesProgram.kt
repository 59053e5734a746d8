package dev.tpcomm.coroutines.local

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.NativeMemoryBudgetException
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.yield

/**
 * Issue 34's buffered messages as a user meets them, run in a child JVM by [UnreceivedMessagesTest]
 * with a native budget of 64 MiB and `local.eagerLimit` raised to 64 MiB, so 8 MiB sends are
 * buffered by the library (as a send to the sender's own rank is at any size). Mode `forget`: rank 0
 * sends 8 MiB messages to rank 1, which never receives, up to 100 times, and prints how it ended.
 * Mode `probe`: a probe posted while a send fails for want of budget stays unanswered by it.
 * Mode `receive`: 200 rounds of an 8 MiB send received (and acknowledged) each time, then 56 MiB of
 * tensors held at once.
 */
object UnreceivedMessagesProgram {
    private const val ELEMENTS = 2 shl 20 // Float32: 8 MiB

    @JvmStatic
    fun main(args: Array<String>) {
        val config = CommConfig(worldSize = 2, options = mapOf(LocalBackendFactory.EAGER_LIMIT_OPTION to (64L shl 20).toString()))
        when (args[0]) {
            "forget" -> runBlocking {
                runLocalWorld(2, config) { comm ->
                    if (comm.rank == 0) {
                        var sent = 0
                        try {
                            repeat(100) { Tensor.zeros(DType.Float32, ELEMENTS).use { comm.send(it, 1, 0) }; sent++ }
                            println("no exception after $sent unreceived sends of 8 MiB")
                        } catch (e: NativeMemoryBudgetException) {
                            println("caught NativeMemoryBudgetException after $sent unreceived sends: ${e.message}")
                        }
                    }
                    comm.barrier()
                }
            }
            "probe" -> runBlocking {
                // A probe posted when a send fails for want of budget is not answered by it: it sees the
                // message only once a later send of it succeeded.
                runLocalWorld(2, config) { comm ->
                    val small = Tensor.zeros(DType.Int32, 1)
                    val big = Tensor.zeros(DType.Float32, ELEMENTS)
                    comm.barrier() // both ranks hold their 8 MiB before rank 0 fills the budget
                    if (comm.rank == 0) {
                        var sent = 0
                        try {
                            repeat(100) { comm.send(big, 1, 0); sent++ }
                        } catch (e: NativeMemoryBudgetException) {
                            println("budget full after $sent sends")
                        }
                        comm.recv(small, 1, 9) // rank 1's probe of tag 7 is posted
                        val failed = try { comm.send(big, 1, 7); false } catch (e: NativeMemoryBudgetException) { true }
                        println("tag 7 send failed for want of budget: $failed")
                        small.setDouble(0, sent.toDouble())
                        comm.send(small, 1, 10)
                        comm.recv(small, 1, 11) // rank 1 drained tag 0
                        big.setDouble(0, 7.0)
                        comm.send(big, 1, 7)
                    } else {
                        coroutineScope {
                            val probe = async { comm.probe(0, 7) }
                            yield()
                            comm.send(small, 0, 9)
                            comm.recv(small, 0, 10)
                            println("probe answered by the failed send: ${probe.isCompleted}")
                            repeat(small.getDouble(0).toInt()) { comm.recv(big, 0, 0) }
                            comm.send(small, 0, 11)
                            val info = probe.await()
                            comm.recv(big, 0, 7)
                            println("probe saw ${info.byteSize} bytes with tag ${info.tag}; received ${big.getDouble(0)}")
                        }
                    }
                    big.close()
                    small.close()
                }
            }
            "receive" -> {
                runBlocking {
                    runLocalWorld(2, config) { comm ->
                        val buf = Tensor.zeros(DType.Float32, ELEMENTS)
                        val ack = Tensor.zeros(DType.Int32, 1)
                        repeat(200) { i ->
                            // A small acknowledgement paces the sender: buffered sends let it run ahead otherwise.
                            if (comm.rank == 0) {
                                Tensor.zeros(DType.Float32, ELEMENTS).use { it.setDouble(0, i.toDouble()); comm.send(it, 1, 0) }
                                comm.recv(ack, 1, 1)
                            } else {
                                comm.recv(buf, 0, 0)
                                check(buf.getDouble(0) == i.toDouble())
                                comm.send(ack, 0, 1)
                            }
                        }
                        buf.close()
                        ack.close()
                    }
                }
                // Every received message's memory is back: 7 x 8 MiB fit in the 64 MiB budget again.
                val held = List(7) { Tensor.zeros(DType.Float32, ELEMENTS) }
                held.forEach { it.close() }
                println("received 200 sends of 8 MiB, then held 56 MiB")
            }
        }
    }
}
