package dev.tpcomm.mpi.jobs

import dev.tpcomm.CommConfig
import dev.tpcomm.PointToPoint
import dev.tpcomm.Tensor
import dev.tpcomm.gatherObject
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import dev.tpcomm.mpi.MpiRuntime
import kotlinx.coroutines.runBlocking
import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of the wrap job: `mpirun -np N java ... MpiWrapMain`. Plays an application that already
 * runs MPI: it makes a communicator of its own through the binding (a duplicate of
 * `MPI_COMM_WORLD`), hands it to [MpiBackendFactory.wrap], uses the tpcomm communicator (allReduce,
 * a sendRecv ring in reverse order, gatherObject), closes it, and then uses and frees its own
 * handle; then it wraps `MPI_COMM_WORLD` itself ([MpiBackendFactory.worldHandle]) the same way.
 * Prints `WRAP OK rank r` and exits 0 when every check held; a failed check exits 3.
 */
object MpiWrapMain {
    private fun check(condition: Boolean, what: () -> String) {
        if (!condition) {
            System.err.println("WRAP FAILED: ${what()}")
            System.err.flush()
            exitProcess(3)
        }
    }

    private suspend fun use(comm: MpiCommunicator, expectedRank: Int, expectedSize: Int, what: String) {
        check(comm.rank == expectedRank && comm.worldSize == expectedSize) { "$what: rank ${comm.rank} of ${comm.worldSize}, expected $expectedRank of $expectedSize" }
        val n = comm.worldSize
        val me = comm.rank
        val sum = comm.allReduce(Tensor.of(intArrayOf(me + 1))).getLong(0).toInt()
        check(sum == n * (n + 1) / 2) { "$what: allReduce gave $sum" }
        val next = (me + 1) % n
        val prev = (me + n - 1) % n
        // 4 MiB: above the eager limit, so a send completes only when matched; receive listed first.
        val got = Tensor.zeros(dev.tpcomm.DType.Int32, 1 shl 20)
        val out = Tensor.zeros(dev.tpcomm.DType.Int32, 1 shl 20).also { it.fill(me.toDouble()) }
        comm.sendRecv(listOf(PointToPoint.recv(got, prev), PointToPoint.send(out, next)))
        check(got.getLong(0).toInt() == prev && got.getLong((1L shl 20) - 1).toInt() == prev) { "$what: sendRecv ring received ${got.getLong(0).toInt()} from $prev" }
        val names = comm.gatherObject("rank-$me-" + "x".repeat(me * 100), root = 0)
        if (me == 0) check(names == List(n) { "rank-$it-" + "x".repeat(it * 100) }) { "$what: gatherObject gave $names" }
    }

    @JvmStatic
    fun main(args: Array<String>) {
        val code = runBlocking {
            val factory = MpiBackendFactory()
            val world = factory.create(CommConfig.fromEnvironment().copy(timeout = 30.seconds)) as MpiCommunicator
            val runtime = checkNotNull(MpiRuntime.current)
            val binding = runtime.binding
            val abi = binding.abi
            Arena.ofShared().use { a ->
                val cell = a.allocate(16, 8)
                // The application's own communicator, made through the binding as a C program would.
                check(binding.commDup(abi.commWorld, cell.address()) == 0) { "MPI_Comm_dup failed" }
                val mine = abi.readHandle(cell, 0)
                val wrapped = factory.wrap(mine, CommConfig(timeout = 30.seconds))
                use(wrapped, world.rank, world.worldSize, "wrapped duplicate")
                wrapped.close()
                // Still the application's: usable after close (size, a barrier, an allreduce), then freed by its owner.
                check(binding.commSize(mine, cell.address() + 8) == 0 && cell.get(ValueLayout.JAVA_INT, 8) == world.worldSize) { "MPI_Comm_size on the handle after close failed" }
                check(binding.barrier(mine) == 0) { "MPI_Barrier on the handle after close failed" }
                val x = a.allocate(8, 8)
                x.set(ValueLayout.JAVA_INT, 0, 1)
                check(binding.allreduce(x.address(), x.address() + 4, 1, abi.datatype(dev.tpcomm.DType.Int32), abi.op(dev.tpcomm.ReduceOp.Sum), mine) == 0) { "MPI_Allreduce on the handle after close failed" }
                check(x.get(ValueLayout.JAVA_INT, 4) == world.worldSize) { "MPI_Allreduce on the handle after close gave ${x.get(ValueLayout.JAVA_INT, 4)}" }
                abi.writeHandle(cell, 0, mine)
                check(binding.commFree(cell.address()) == 0) { "MPI_Comm_free by the owner failed: was the handle freed by tpcomm?" }

                // MPI_COMM_WORLD itself: tpcomm works on its own duplicate and leaves the world as it was.
                val worldHandle = factory.worldHandle()
                check(worldHandle == abi.commWorld) { "worldHandle() = $worldHandle, MPI_COMM_WORLD is ${abi.commWorld}" }
                val overWorld = factory.wrap(worldHandle, CommConfig(timeout = 30.seconds))
                use(overWorld, world.rank, world.worldSize, "wrapped MPI_COMM_WORLD")
                overWorld.close()
                check(binding.barrier(abi.commWorld) == 0) { "MPI_Barrier on MPI_COMM_WORLD after close failed" }
            }
            // The process's first communicator is still fine, and its close finalizes MPI (tpcomm initialised it).
            check(world.allReduce(Tensor.of(intArrayOf(1))).getLong(0).toInt() == world.worldSize) { "the world communicator broke" }
            println("WRAP OK rank ${world.rank}")
            System.out.flush()
            world.close()
            0
        }
        exitProcess(code)
    }
}
