package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.allReduceAsync
import dev.tpcomm.coroutines.awaitAll
import dev.tpcomm.mpi.MpiCommunicator
import dev.tpcomm.mpi.MpiProgress
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.nio.channels.FileChannel
import java.nio.file.Files
import java.nio.file.Path
import java.nio.file.StandardOpenOption
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of the misuse job for [dev.tpcomm.mpi.MpiMisuseJobsTest]: what a user's program does
 * wrong or expects, on a real MPI job (`mpirun -np 3 java ... MpiMisuseMain <outDir>`). Each case
 * runs on every rank and reports Passed/Failed through [CaseReports]; cases that break a
 * communicator run on a duplicate, so the world communicator stays usable for the next case.
 */
object MpiMisuseMain {
    val CASES: List<String> = listOf(
        "withTimeout around a blocking all-reduce raises CommunicationTimeoutException at its deadline",
        "awaitAll(timeout) around a blocking all-reduce raises CommunicationTimeoutException at its deadline",
        "withTimeout in non-blocking mode: the follow-up exception names the operation",
        "a heap segment is refused with IllegalArgumentException",
        "a read-only segment is refused as an output",
        "a chunk of a closed tensor is refused",
        "an all-gather whose result exceeds MPI's int count is refused",
        "a half-precision all-reduce whose staging exceeds MPI's int count is refused",
        "a tag above MPI_TAG_UB is refused before MPI sees it",
        "an in-place all-gather (input is this rank's block of the output) is refused and keeps the communicator",
        "closing a tensor while its all-reduce is in flight defers the free until MPI is done",
        "withTimeout around split and duplicate raises CommunicationTimeoutException at its deadline",
    )

    private class Failed(message: String) : Exception(message)

    private fun expect(ok: Boolean, message: () -> String) {
        if (!ok) throw Failed(message())
    }

    private inline fun <reified E : Throwable> expectThrows(what: String, block: () -> Unit): E {
        try {
            block()
        } catch (e: Throwable) {
            if (e is E) return e
            throw Failed("$what: expected ${E::class.simpleName}, got ${e.javaClass.name}: ${e.message}")
        }
        throw Failed("$what: expected ${E::class.simpleName}, nothing was thrown")
    }

    /** A tensor over [bytes] of a sparse file mapping: address space, no memory until touched. */
    private fun sparse(dtype: DType, n: Int): Tensor {
        val f = Files.createTempFile("tpcomm-sparse", ".bin")
        f.toFile().deleteOnExit()
        val bytes = n.toLong() * dtype.byteSize
        FileChannel.open(f, StandardOpenOption.READ, StandardOpenOption.WRITE).use { ch ->
            ch.position(bytes - 1); ch.write(java.nio.ByteBuffer.wrap(byteArrayOf(0)))
            return Tensor.wrap(ch.map(FileChannel.MapMode.READ_WRITE, 0, bytes, Arena.global()), dtype, n)
        }
    }

    @JvmStatic
    fun main(args: Array<String>) {
        val out = Path.of(args[0])
        runBlocking {
            val world = Comm.create("mpi", CommConfig.fromEnvironment().copy(timeout = 30.seconds)) as MpiCommunicator
            val r = world.rank
            val outcomes = ArrayList<CaseOutcome>()
            for (case in CASES) {
                val outcome = try {
                    runCase(case, world)
                    CaseOutcome(case, "Passed", "")
                } catch (e: Throwable) {
                    CaseOutcome(case, "Failed", "${e.javaClass.name}: ${e.message}")
                }
                outcomes += outcome
                System.err.println("rank $r: ${outcome.status} $case ${outcome.message}")
                world.barrier()
            }
            CaseReports.write(out, r, outcomes)
            world.close()
        }
        exitProcess(0)
    }

    private suspend fun runCase(case: String, world: MpiCommunicator) {
        val r = world.rank
        when (case) {
            CASES[0], CASES[1] -> {
                // Rank 0 waits at most 1 s; the others join after 3 s (the call then completes
                // natively, so the job lives on); the communicator's own timeout is 20 s.
                val dup = world.duplicate(world.config.copy(timeout = 20.seconds), world.mpiConfig.copy(progress = MpiProgress.Blocking))
                val t = Tensor.of(floatArrayOf(1f))
                if (r == 0) {
                    val start = System.nanoTime()
                    val e = expectThrows<CommunicationTimeoutException>("rank 0") {
                        if (case == CASES[0]) {
                            withTimeout(1.seconds) { dup.allReduce(t) }
                        } else {
                            coroutineScope { listOf(allReduceAsync(dup, t)).awaitAll(timeout = 1.seconds, comm = dup) }
                        }
                    }
                    val ms = (System.nanoTime() - start) / 1_000_000
                    expect(ms < 2_000) { "the caller was told after $ms ms, its deadline was 1000 ms (${e.message})" }
                    expect(dup.isAborted) { "the communicator is not aborted after the caller's deadline" }
                } else {
                    Thread.sleep(3_000)
                    dup.allReduce(t)
                }
                dup.close()
            }
            CASES[2] -> {
                val dup = world.duplicate(world.config.copy(timeout = 20.seconds), world.mpiConfig.copy(progress = MpiProgress.NonBlocking, abortOnTimeout = false))
                val t = Tensor.of(floatArrayOf(1f))
                if (r == 0) {
                    expectThrows<CommunicationTimeoutException>("rank 0") { withTimeout(1.seconds) { dup.allReduce(t) } }
                    val next = expectThrows<CommunicatorAbortedException>("the next call") { dup.allReduce(t) }
                    val cause = next.cause as? CommunicationException
                    expect(cause != null && cause.operation == "allReduce") { "the follow-up's cause names operation '${cause?.operation}': ${next.message}" }
                    expect(next.message!!.contains("allReduce #")) { "the follow-up does not name the operation: ${next.message}" }
                } else {
                    Thread.sleep(3_000)
                    try { dup.allReduce(t) } catch (_: CommunicationException) { }
                }
                dup.close()
            }
            CASES[3] -> {
                val heap = Tensor.wrap(MemorySegment.ofArray(FloatArray(4)), DType.Float32, 4)
                val e = expectThrows<IllegalArgumentException>("allReduce of a heap tensor") { world.allReduce(heap) }
                expect(e.message!!.contains("heap")) { "the message does not say heap: ${e.message}" }
            }
            CASES[4] -> {
                val ro = Tensor.wrap(Arena.ofAuto().allocate(16).asReadOnly(), DType.Float32, 4)
                val e = expectThrows<IllegalArgumentException>("allReduce into a read-only tensor") { world.allReduce(ro) }
                expect(e.message!!.contains("read-only")) { "the message does not say read-only: ${e.message}" }
            }
            CASES[5] -> {
                val parent = Tensor.zeros(DType.Float32, 8)
                val view = parent.chunk(2)[0]
                parent.close()
                val e = expectThrows<IllegalArgumentException>("allReduce of a chunk of a closed tensor") { world.allReduce(view) }
                expect(e.message!!.contains("closed")) { "the message does not say closed: ${e.message}" }
            }
            CASES[6] -> {
                // 3 ranks x 1431655766 bytes = 4294967298 elements: as an Int the product is 2.
                val n = Int.MAX_VALUE / world.worldSize + 1
                val input = sparse(DType.Int8, n)
                val output = Tensor.zeros(DType.Int8, (n.toLong() * world.worldSize).toInt().coerceAtLeast(1))
                val e = expectThrows<IllegalArgumentException>("allGatherInto of ${world.worldSize} x $n bytes") { world.allGatherInto(output, input) }
                expect(e.message!!.contains("${n.toLong() * world.worldSize}")) { "the message does not name the size: ${e.message}" }
            }
            CASES[7] -> {
                val n = Int.MAX_VALUE / world.worldSize + 1
                val input = sparse(DType.Float16, n)
                val e = expectThrows<IllegalArgumentException>("Float16 allReduce of $n elements") { world.allReduce(input) }
                expect(e.message!!.contains("${n.toLong() * world.worldSize}")) { "the message does not name the size: ${e.message}" }
            }
            CASES[8] -> {
                val ub = world.tagUpperBound
                expect(ub >= 32767) { "MPI_TAG_UB is $ub, below the standard's minimum 32767" }
                if (ub < Int.MAX_VALUE) {
                    val e = expectThrows<IllegalArgumentException>("send with tag ${ub + 1}") { world.send(Tensor.of(floatArrayOf(1f)), (r + 1) % world.worldSize, ub + 1) }
                    expect(e.message!!.contains("$ub")) { "the message does not name MPI_TAG_UB $ub: ${e.message}" }
                    expectThrows<IllegalArgumentException>("recv with tag ${ub + 1}") { world.recv(Tensor.of(floatArrayOf(1f)), (r + 1) % world.worldSize, ub + 1) }
                }
                // The largest tag works.
                val peer = (r + 1) % world.worldSize
                val from = (r - 1 + world.worldSize) % world.worldSize
                coroutineScope {
                    val got = Tensor.zeros(DType.Float32, 1)
                    val recv = async { world.recv(got, from, ub) }
                    world.send(Tensor.of(floatArrayOf(r.toFloat())), peer, ub)
                    recv.await()
                    expect(got.toFloatArray()[0] == from.toFloat()) { "tag $ub: received ${got.toFloatArray()[0]} from $from" }
                }
            }
            CASES[9] -> {
                val n = 4
                val output = Tensor.zeros(DType.Float32, n * world.worldSize)
                val mine = output.chunk(world.worldSize)[r]
                for (i in 0 until n) mine.segment.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, i.toLong(), (r * 10 + i).toFloat())
                // MPICH failed the call ("Buffers must not be aliased") and aborted the communicator;
                // the core's validator refuses it on every backend, before MPI sees it.
                val e = expectThrows<IllegalArgumentException>("allGatherInto with the input inside the output") { world.allGatherInto(output, mine) }
                expect(e.message!!.contains("share memory")) { "the message does not say the buffers overlap: ${e.message}" }
                expect(!world.isAborted) { "the communicator was aborted" }
                val t = Tensor.of(floatArrayOf(1f))
                world.allReduce(t)
                expect(t.toFloatArray()[0] == world.worldSize.toFloat()) { "all-reduce after the in-place all-gather gave ${t.toFloatArray()[0]}" }
            }
            CASES[10] -> {
                // 16 MiB, rank 0 first: its all-reduce is in flight while the others arrive 2 s later.
                val n = 4 * 1024 * 1024
                val t = Tensor.zeros(DType.Float32, n)
                t.segment.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, n - 1L, 1f)
                if (r != 0) Thread.sleep(2_000)
                coroutineScope {
                    val h = allReduceAsync(world, t)
                    if (r == 0) {
                        Thread.sleep(200)
                        t.close() // the user frees the tensor while MPI still writes it
                        expect(t.isClosed) { "close() did not mark the tensor closed" }
                    }
                    h.await()
                    if (r != 0) {
                        val last = t.segment.getAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, n - 1L)
                        expect(last == world.worldSize.toFloat()) { "the all-reduce gave $last" }
                    }
                }
                // The job lives on (no SIGSEGV, no UCX abort): one more collective.
                val one = Tensor.of(floatArrayOf(1f))
                world.allReduce(one)
                expect(one.toFloatArray()[0] == world.worldSize.toFloat()) { "all-reduce after the deferred close gave ${one.toFloatArray()[0]}" }
            }
            CASES[11] -> {
                // As CASES[0] for the collectives that create communicators: rank 0 waits at most
                // 1 s, the others join after 3 s (MPI_Comm_split / MPI_Comm_dup then complete
                // natively); the communicators' own timeout is 20 s.
                for (which in listOf("split", "duplicate")) {
                    val dup = world.duplicate(world.config.copy(timeout = 20.seconds), world.mpiConfig.copy(progress = MpiProgress.Blocking))
                    if (r == 0) {
                        val start = System.nanoTime()
                        val e = expectThrows<CommunicationTimeoutException>("rank 0, $which") {
                            withTimeout(1.seconds) { if (which == "split") dup.split(0, r) else dup.duplicate() }
                        }
                        val ms = (System.nanoTime() - start) / 1_000_000
                        expect(ms < 2_000) { "$which: the caller was told after $ms ms, its deadline was 1000 ms (${e.message})" }
                        expect(e.operation == which) { "$which: the exception names '${e.operation}': ${e.message}" }
                        expect(dup.isAborted) { "$which: the communicator is not aborted after the caller's deadline" }
                        Thread.sleep(3_000) // the others complete the call with this rank's native thread
                    } else {
                        Thread.sleep(3_000)
                        val made = if (which == "split") dup.split(0, r) else dup.duplicate()
                        made?.close()
                    }
                    dup.close()
                }
            }
            else -> error("unknown case $case")
        }
    }
}
