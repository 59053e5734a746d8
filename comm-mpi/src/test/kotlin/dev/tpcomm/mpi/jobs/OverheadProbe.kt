package dev.tpcomm.mpi.jobs

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import dev.tpcomm.mpi.MpiDowncalls
import dev.tpcomm.mpi.MpiLibrary
import dev.tpcomm.mpi.MpiSignatureProtocol
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext

/**
 * Diagnostic: per-call cost of allReduce on the communicator's thread, next to a raw FFM downcall
 * of MPI_Allreduce on MPI_COMM_WORLD in place and out of place. Runs alone (a singleton world) or
 * under mpirun (every rank runs the same loops, so they stay in step). `PROBE_N` sets the calls
 * per loop (default 10^6), `PROBE_FLOATS` the float32 elements per call (default 2).
 */
object OverheadProbe {
    @JvmStatic
    fun main(args: Array<String>) {
        runBlocking {
            val comm = MpiBackendFactory().create(CommConfig.fromEnvironment()) as MpiCommunicator
            val count = System.getenv("PROBE_FLOATS")?.toInt() ?: 2
            val t = Tensor.zeros(DType.Float32, count)
            if (comm.rank == 0) println("provided thread level ${dev.tpcomm.mpi.MpiRuntime.current?.providedThreadLevel}, world ${comm.worldSize}")
            val out = Tensor.zeros(DType.Float32, count)
            val abi = MpiLibrary.loaded!!.abi
            val world = abi.commWorld
            val type = abi.datatype(DType.Float32)
            val sum = abi.op(ReduceOp.Sum)
            val buf = t.segment.address(); val dst = out.segment.address(); val inPlace = abi.inPlace
            val h = MpiDowncalls.ALLREDUCE
            // The same function through a critical downcall (no thread-state transition), to size that transition.
            val hl = if (MpiLibrary.loaded!!.implementation.mpichAbi) java.lang.foreign.ValueLayout.JAVA_INT else java.lang.foreign.ValueLayout.JAVA_LONG
            val critical = java.lang.invoke.MethodHandles.explicitCastArguments(
                java.lang.foreign.Linker.nativeLinker().downcallHandle(
                    java.lang.foreign.MemorySegment.ofAddress(MpiLibrary.loaded!!.find("MPI_Allreduce")),
                    java.lang.foreign.FunctionDescriptor.of(java.lang.foreign.ValueLayout.JAVA_INT, java.lang.foreign.ValueLayout.JAVA_LONG,
                        java.lang.foreign.ValueLayout.JAVA_LONG, java.lang.foreign.ValueLayout.JAVA_INT, hl, hl, hl),
                    java.lang.foreign.Linker.Option.critical(false),
                ),
                java.lang.invoke.MethodType.methodType(Int::class.javaPrimitiveType, Long::class.javaPrimitiveType, Long::class.javaPrimitiveType,
                    Int::class.javaPrimitiveType, Long::class.javaPrimitiveType, Long::class.javaPrimitiveType, Long::class.javaPrimitiveType),
            )
            // The consistency check's slots, as MpiSignatureProtocol lays them out.
            val slotSend = java.lang.foreign.Arena.global().allocate(MpiSignatureProtocol.SLOT_BYTES, 64)
            val slots = java.lang.foreign.Arena.global().allocate(MpiSignatureProtocol.SLOT_BYTES * comm.worldSize, 64)
            val slotLongs = MpiSignatureProtocol.SLOT_LONGS
            val i64 = abi.int64Type
            val ag = MpiDowncalls.ALLGATHER
            withContext(comm.nativeDispatcher) {
                repeat(5) { round ->
                    val n = System.getenv("PROBE_N")?.toInt() ?: 1_000_000
                    var t0 = System.nanoTime()
                    for (i in 0 until n) comm.allReduce(t)
                    val dt = (System.nanoTime() - t0).toDouble() / n
                    t0 = System.nanoTime()
                    for (i in 0 until n) { val rc = h.invokeExact(inPlace, buf, count, type, sum, world) as Int; check(rc == 0) }
                    val raw = (System.nanoTime() - t0).toDouble() / n
                    t0 = System.nanoTime()
                    for (i in 0 until n) { val rc = h.invokeExact(buf, dst, count, type, sum, world) as Int; check(rc == 0) }
                    val rawOut = (System.nanoTime() - t0).toDouble() / n
                    t0 = System.nanoTime()
                    for (i in 0 until n) { val rc = critical.invokeExact(inPlace, buf, count, type, sum, world) as Int; check(rc == 0) }
                    val rawCritical = (System.nanoTime() - t0).toDouble() / n
                    // The consistency check's exchange alone: one slot per rank, all-gathered.
                    t0 = System.nanoTime()
                    for (i in 0 until n) { val rc = ag.invokeExact(slotSend.address(), slotLongs, i64, slots.address(), slotLongs, i64, world) as Int; check(rc == 0) }
                    val rawSlots = (System.nanoTime() - t0).toDouble() / n
                    // The check's exchange, then the operation: what a checked call too big for a slot costs MPI.
                    t0 = System.nanoTime()
                    for (i in 0 until n) {
                        val rc1 = ag.invokeExact(slotSend.address(), slotLongs, i64, slots.address(), slotLongs, i64, world) as Int
                        val rc2 = h.invokeExact(inPlace, buf, count, type, sum, world) as Int
                        check(rc1 == 0 && rc2 == 0)
                    }
                    val rawChecked = (System.nanoTime() - t0).toDouble() / n
                    val rec = dev.tpcomm.coroutines.FlightRecorder(64, 0, "mpi", timing = false)
                    val shape = t.shape
                    t0 = System.nanoTime()
                    for (i in 0 until n) rec.start("allReduce", DType.Float32, shape, 8L, reduceOp = ReduceOp.Sum).complete()
                    val recNs = (System.nanoTime() - t0).toDouble() / n
                    if (comm.rank == 0) println("round $round: flight recorder start+complete ${"%.1f".format(recNs)} ns")
                    if (comm.rank == 0) println("round $round: allReduce ${"%.1f".format(dt)} ns/call, raw in-place ${"%.1f".format(raw)}, raw out-of-place ${"%.1f".format(rawOut)}, raw critical in-place ${"%.1f".format(rawCritical)}, raw slot all-gather ${"%.1f".format(rawSlots)}, raw slot all-gather + in-place ${"%.1f".format(rawChecked)}")
                }
            }
            comm.close()
        }
    }
}
