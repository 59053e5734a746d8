package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.allReduceAsync
import dev.tpcomm.coroutines.awaitAll
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of a job for [dev.tpcomm.mpi.MpiLatePeerJobsTest] (issue 32, findings 4 and 5): a
 * caller's own timeout against a late peer on a split communicator.
 * `mpirun -np 3 java ... MpiLatePeerMain <timeoutSeconds> <lateSeconds>`.
 *
 * Every rank creates the world, splits it (`split(color = 0)`: one sub-communicator of every rank)
 * and all-reduces once on it. Then every rank starts an all-reduce with `allReduceAsync` and waits
 * for it with `awaitAll(timeout = 2 s)`; the last rank sleeps `lateSeconds` (default 6) first, so
 * the others' 2 s pass and abort the sub-communicator. Then every rank calls one more all-reduce
 * on the sub-communicator (on the caller's thread, the natural call path), leaves the
 * sub-communicator unclosed (the process's end finalizes MPI), closes the world and exits 0.
 *
 * Lines printed for the test (`<r>` the world rank):
 * - `FIRST rank <r> ok <sum>` or `FIRST rank <r> CAUGHT <class>: <message>`: the timed call.
 * - `NEXT rank <r> CAUGHT <class> after <ms> ms: <message>` or `NEXT rank <r> ok <sum> after <ms> ms`: the next call.
 * - `DONE rank <r>` before the process exits.
 */
object MpiLatePeerMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val timeoutSeconds = args.getOrElse(0) { "30" }.toInt()
        val lateSeconds = args.getOrElse(1) { "6" }.toLong()
        val config = CommConfig.fromEnvironment().copy(timeout = timeoutSeconds.seconds)
        runBlocking {
            val world = Comm.create("mpi", config)
            val r = world.rank
            val sub = world.split(0) ?: error("split(color = 0) gave rank $r no communicator")
            val warm = Tensor.of(floatArrayOf(1f))
            sub.allReduce(warm)
            check(warm.toFloatArray()[0] == sub.worldSize.toFloat()) { "the warm-up all-reduce gave ${warm.toFloatArray()[0]}" }

            if (r == world.worldSize - 1) Thread.sleep(lateSeconds * 1000)
            val t = Tensor.of(floatArrayOf(r + 1f))
            try {
                listOf(allReduceAsync(sub, t)).awaitAll(2.seconds, sub)
                say("FIRST rank $r ok ${t.toFloatArray()[0]}")
            } catch (e: CommunicationException) {
                say("FIRST rank $r CAUGHT ${e.javaClass.name}: ${e.message?.lineSequence()?.first()}")
            }

            val next = Tensor.of(floatArrayOf(1f))
            val started = System.nanoTime()
            try {
                sub.allReduce(next)
                say("NEXT rank $r ok ${next.toFloatArray()[0]} after ${(System.nanoTime() - started) / 1_000_000} ms")
            } catch (e: CommunicationException) {
                val kind = if (e is CommunicationTimeoutException) "${e.javaClass.name} (timeout)" else e.javaClass.name
                say("NEXT rank $r CAUGHT $kind after ${(System.nanoTime() - started) / 1_000_000} ms: ${e.message?.lineSequence()?.first()}")
            }
            world.close()
            say("DONE rank $r")
        }
        exitProcess(0)
    }
}
