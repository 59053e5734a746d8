package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.reproducible
import dev.tpcomm.mpi.MpiCommunicator
import dev.tpcomm.mpi.MpiConfig
import kotlinx.coroutines.withContext
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of the job for [dev.tpcomm.mpi.MpiReproducibleJobsTest] (issue 36): small reproducible
 * reductions, called as users call them (`comm.reproducible()`, from `runBlocking` and from the
 * communicator's thread), are one operation of the MPI backend: the MPI calls they make, read from
 * the communicator's own profile (`mpi.profiling`), are the consistency check's exchange, which
 * carries 8-byte inputs (before: that exchange and the composite's all-gather, two MPI calls), and
 * for 4 KiB one gather. Their values are the exact sums (inputs whose sums are exact in float32).
 * Each case runs on a duplicate of the world, so its profile is its own.
 */
object MpiReproducibleMain {
    val CASES: List<String> = listOf(
        "a reproducible 8-byte allReduce rides in the consistency check: one MPI call per call",
        "a reproducible 4 KiB allReduce and reduce are the check and one MPI gather each, with the exact sums",
        "the same from the communicator's own thread (the fast path)",
    )

    private const val CALLS = 20

    @JvmStatic
    fun main(args: Array<String>) {
        DuplicateCases.runJob(args, { Comm.create("mpi", CommConfig(timeout = 30.seconds, options = mapOf(MpiConfig.PROFILING to "true"))) as MpiCommunicator }) {
            // Element k of rank r: (k + 1) * 2^-r, so every sum is exact in float32 and known.
            fun input(comm: MpiCommunicator, n: Int) = Tensor.of(FloatArray(n) { k -> Math.scalb((k + 1).toFloat(), -comm.rank) }, n)
            fun expected(comm: MpiCommunicator, n: Int) = List(n) { k -> (0 until comm.worldSize).sumOf { r -> Math.scalb((k + 1).toDouble(), -r) }.toFloat() }
            suspend fun small(comm: MpiCommunicator) {
                repeat(CALLS) {
                    val t = input(comm, 2)
                    comm.reproducible().allReduce(t, ReduceOp.Sum)
                    check(t.toFloatArray().toList() == expected(comm, 2)) { "8 B allReduce gave ${t.toFloatArray().toList()}, expected ${expected(comm, 2)}" }
                }
                val p = comm.profile()
                // One MPI call per operation: the check's exchange, which carried the inputs.
                check(p.keys == setOf("allReduce(signature)") && p.getValue("allReduce(signature)").count == CALLS.toLong()) {
                    "8 B allReduce x$CALLS: expected only the check's exchange, $CALLS times; MPI calls ${p.mapValues { it.value.count }}"
                }
            }
            suspend fun medium(comm: MpiCommunicator) {
                val n = 1024 // 4 KiB of float32: gathered by the backend, not carried in a slot
                repeat(CALLS) {
                    val t = input(comm, n)
                    comm.reproducible().allReduce(t, ReduceOp.Sum)
                    check(t.toFloatArray().toList() == expected(comm, n)) { "4 KiB allReduce: wrong values" }
                    val root = it % comm.worldSize
                    val r = input(comm, n)
                    comm.reproducible().reduce(r, root, ReduceOp.Sum)
                    if (comm.rank == root) check(r.toFloatArray().toList() == expected(comm, n)) { "4 KiB reduce to $root: wrong values" }
                    else check(r.toFloatArray().toList() == input(comm, n).toFloatArray().toList()) { "4 KiB reduce to $root changed rank ${comm.rank}'s input" }
                }
                val counts = comm.profile().mapValues { it.value.count }
                val want = listOf("allReduce(signature)", "allReduce", "reduce(signature)", "reduce").associateWith { CALLS.toLong() }
                check(counts == want) { "4 KiB allReduce and reduce x$CALLS: expected the check and one MPI gather each, $want; MPI calls $counts" }
            }
            case(CASES[0]) { comm -> small(comm) }
            case(CASES[1]) { comm -> medium(comm) }
            case(CASES[2]) { comm ->
                withContext(comm.nativeDispatcher) {
                    small(comm)
                }
                comm.duplicate().use { other -> withContext((other as MpiCommunicator).nativeDispatcher) { medium(other) } }
            }
        }
    }
}
