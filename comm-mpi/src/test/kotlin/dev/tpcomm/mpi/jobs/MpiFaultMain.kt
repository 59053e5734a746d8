package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of a fault job for [dev.tpcomm.mpi.MpiFaultJobsTest]:
 * `mpirun -np 3 java ... MpiFaultMain <mode> <timeoutSeconds>`. The last rank is the victim; every
 * rank is what a user's training program would be (`Comm.create("mpi")`, collectives, `close()`,
 * return from `main`). Lines printed for the test: `FAULT <epochMillis>` when the victim's fault
 * happens (the deadline is counted from there), `DONE rank <r>` when a rank finished normally,
 * `CAUGHT rank <r> <exception class>: <message>` when a call threw.
 *
 * Modes (the victim is rank `worldSize - 1`):
 * - `early`: the victim returns from main after the first all-reduce (no close); the others call a second.
 * - `exit`: the victim calls `System.exit(0)` instead of the second all-reduce.
 * - `exitduring`: the victim enters the second all-reduce before the others (they sleep 3 s first)
 *   and another of its threads calls `System.exit(0)` 1 s later, while the all-reduce waits.
 * - `kill9`: the victim kills itself with `kill -9`.
 * - `stuck`: the victim computes forever (a busy loop) instead of the second all-reduce.
 * - `apart`: rank 0 finishes and closes at once; the others compute (sleep) for `apartSeconds`
 *   (default 12, more than the old fixed 10 s finalize wait), then close. A healthy job when the
 *   timeout is longer than that: it must complete with exit 0 on every rank.
 * - `throw`: the victim's second all-reduce throws inside the collective (a closed tensor).
 * - `late`: the victim sleeps 30 s before `Comm.create`; the creation deadline is the operation
 *   timeout (`CommConfig.creationTimeout`), as a user who wants a missing rank found fast sets it.
 * - `latejoin`: the victim sleeps 10 s before `Comm.create`, longer than the operation timeout,
 *   with the default creation deadline (5 minutes): a healthy job, every rank all-reduces and exits 0.
 * - `recvsize`: rank 0 sends 16 floats to rank 1, which receives into 8 (wrong size), then receives
 *   into 16; every rank then all-reduces, closes and exits 0.
 * - `selfsend`: every rank sends 16 MiB to itself, then receives it, checks it, and closes.
 * - `monbar`: every rank calls `monitoredBarrier(2 s)`; the victim sleeps 6 s first (past the
 *   others' deadline), then calls it too. The others print what they caught and rethrow it.
 */
object MpiFaultMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val mode = args[0]
        val timeoutSeconds = args.getOrElse(1) { "5" }.toInt()
        val apartSeconds = args.getOrElse(2) { "12" }.toLong()
        val rankGuess = (System.getenv("OMPI_COMM_WORLD_RANK") ?: System.getenv("PMI_RANK"))?.toInt() ?: 0
        val sizeGuess = (System.getenv("OMPI_COMM_WORLD_SIZE") ?: System.getenv("PMI_SIZE"))?.toInt() ?: 1
        val victimGuess = rankGuess == sizeGuess - 1
        val config = CommConfig.fromEnvironment().copy(timeout = timeoutSeconds.seconds)
            .let { if (mode == "late") it.copy(creationTimeout = timeoutSeconds.seconds) else it }
        runBlocking {
            if (mode == "late" || mode == "latejoin") {
                if (victimGuess) {
                    Thread.sleep(if (mode == "late") 30_000 else 10_000)
                } else {
                    say("FAULT ${System.currentTimeMillis()}")
                }
            }
            val comm = try {
                Comm.create("mpi", config)
            } catch (e: Exception) {
                say("CAUGHT rank $rankGuess ${e.javaClass.name}: ${e.message}")
                throw e
            }
            val victim = comm.rank == comm.worldSize - 1
            val t = Tensor.of(floatArrayOf(1f, 2f, 3f))
            comm.allReduce(t)
            when (mode) {
                "early" -> if (victim) { say("FAULT ${System.currentTimeMillis()}"); return@runBlocking } else secondCall(comm, t)
                "exit" -> if (victim) { say("FAULT ${System.currentTimeMillis()}"); System.exit(0) } else secondCall(comm, t)
                "exitduring" -> if (victim) {
                    Thread.ofPlatform().daemon(true).start {
                        Thread.sleep(1_000)
                        say("FAULT ${System.currentTimeMillis()}")
                        System.exit(0)
                    }
                    secondCall(comm, t)
                } else {
                    Thread.sleep(3_000)
                    secondCall(comm, t)
                }
                "kill9" -> if (victim) {
                    say("FAULT ${System.currentTimeMillis()}")
                    ProcessBuilder("kill", "-9", ProcessHandle.current().pid().toString()).inheritIO().start().waitFor()
                    Thread.sleep(60_000)
                } else secondCall(comm, t)
                "stuck" -> if (victim) {
                    say("FAULT ${System.currentTimeMillis()}")
                    var x = 0L
                    while (true) { x = x * 31 + 7; if (x == 42L) break }
                    println(x)
                } else secondCall(comm, t)
                "throw" -> if (victim) {
                    say("FAULT ${System.currentTimeMillis()}")
                    val closed = Tensor.of(floatArrayOf(1f, 2f, 3f)).also { it.close() }
                    comm.allReduce(closed)
                } else secondCall(comm, t)
                "apart" -> {
                    if (comm.rank == 0) {
                        say("FAULT ${System.currentTimeMillis()}")
                    } else {
                        // A checkpoint save, say: no MPI call for longer than the old fixed finalize wait.
                        Thread.sleep(apartSeconds * 1000)
                    }
                }
                "late", "latejoin" -> comm.allReduce(t)
                "recvsize" -> recvSize(comm)
                "selfsend" -> selfSend(comm)
                "monbar" -> {
                    if (victim) {
                        say("FAULT ${System.currentTimeMillis()}")
                        Thread.sleep(6_000)
                    }
                    try {
                        comm.monitoredBarrier(2.seconds)
                        say("WRONG rank ${comm.rank}: monitoredBarrier returned although rank ${comm.worldSize - 1} was late")
                    } catch (e: CommunicationException) {
                        say("CAUGHT rank ${comm.rank} ${e.javaClass.name}: ${e.message}")
                        throw e
                    }
                }
                else -> error("unknown mode $mode")
            }
            comm.close()
            say("DONE rank ${comm.rank}")
        }
        exitProcess(0)
    }

    private suspend fun secondCall(comm: Communicator, t: Tensor) {
        try {
            comm.allReduce(t)
        } catch (e: CommunicationException) {
            say("CAUGHT rank ${comm.rank} ${e.javaClass.name}: ${e.message}")
            throw e
        }
    }

    private suspend fun recvSize(comm: Communicator) {
        if (comm.rank == 0) {
            comm.send(Tensor.of(FloatArray(16) { it.toFloat() }), 1, 5)
        } else if (comm.rank == 1) {
            try {
                comm.recv(Tensor.zeros(DType.Float32, 8), 0, 5)
                say("WRONG rank 1: a receive into 8 floats of a 16-float message succeeded")
            } catch (e: CommunicationException) {
                say("CAUGHT rank 1 ${e.javaClass.name}: ${e.message}")
            }
            val right = Tensor.zeros(DType.Float32, 16)
            comm.recv(right, 0, 5)
            check(right.toFloatArray().contentEquals(FloatArray(16) { it.toFloat() })) { "wrong data received" }
            say("RECEIVED rank 1 16 floats")
        }
        val t = Tensor.of(floatArrayOf(1f))
        comm.allReduce(t)
        check(t.toFloatArray()[0] == comm.worldSize.toFloat()) { "all-reduce after the refused receive gave ${t.toFloatArray()[0]}" }
    }

    private suspend fun selfSend(comm: Communicator) {
        val n = 4 * 1024 * 1024 // 16 MiB of floats
        val out = Tensor.zeros(DType.Float32, n)
        for (i in 0 until n step 4096) out.segment.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, i.toLong(), i.toFloat())
        comm.send(out, comm.rank, 9)
        val back = Tensor.zeros(DType.Float32, n)
        comm.recv(back, comm.rank, 9)
        check(back.contentEquals(out)) { "the self-sent 16 MiB came back different" }
        say("RECEIVED rank ${comm.rank} 16 MiB from itself")
    }
}
