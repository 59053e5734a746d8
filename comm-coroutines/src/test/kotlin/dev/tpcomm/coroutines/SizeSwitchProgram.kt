package dev.tpcomm.coroutines

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import kotlinx.coroutines.runBlocking

/**
 * Test aid, run in a child JVM by [SizeSwitchDeoptTest]: what a training loop does when it moves
 * from small all-reduces (a loss, a count) to large ones (gradients): 4 in-process ranks, `small`
 * 8-byte float32 all-reduces, then 3 of 1 MiB, each from fresh tensors. Prints the milliseconds of
 * each large call on rank 0 (`large_ms=<a>,<b>,<c>`), for reading beside the JIT's log.
 */
internal object SizeSwitchProgram {
    @JvmStatic
    fun main(args: Array<String>) {
        val small = args.firstOrNull()?.toInt() ?: 30_000
        runBlocking {
            runLocalWorld(4) { comm ->
                Tensor.zeros(DType.Float32, 2).use { t -> repeat(small) { comm.allReduce(t) } }
                val times = ArrayList<Long>()
                repeat(3) {
                    Tensor.zeros(DType.Float32, 256 * 1024).use { t ->
                        comm.barrier()
                        val t0 = System.nanoTime()
                        comm.allReduce(t)
                        times += (System.nanoTime() - t0) / 1_000_000
                    }
                }
                if (comm.rank == 0) println("large_ms=${times.joinToString(",")}")
            }
        }
    }
}
