package dev.tpcomm.nccl

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.DeviceCopies
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.nccl.javacpp.JavaCppNcclApi
import dev.tpcomm.nccl.javacpp.JavaCppPlatform
import org.bytedeco.javacpp.Pointer

/**
 * Issue 35 finding 7 on a machine where `libnccl.so.2` loads (`gpu-check allocations`, run by the GPU
 * bundle): with JavaCPP's guard at its tightest (`org.bytedeco.javacpp.maxPhysicalBytes` and
 * `maxBytes` of one byte, no retries), any allocation JavaCPP accounts for throws its
 * `OutOfMemoryError` ("Physical memory usage is too high" or "Cannot allocate"), so a user's program
 * whose heap is near JavaCPP's limit would fail there although NCCL was never short of anything.
 * Checks `ncclGetUniqueId` (100 calls), `Comm.create` (the init), `split` and an all-reduce on the
 * child, each on its own: prints one line per check and returns the number that failed.
 *
 * The properties must be set before JavaCPP's `Pointer` is initialised (it reads them once): this
 * runs first in its own JVM.
 */
@OptIn(dev.tpcomm.InternalTpcommApi::class)
internal object JavaCppAllocationsCheck {
    suspend fun run(config: CommConfig): Int {
        System.setProperty("org.bytedeco.javacpp.maxBytes", "1")
        System.setProperty("org.bytedeco.javacpp.maxPhysicalBytes", "1")
        System.setProperty("org.bytedeco.javacpp.maxRetries", "0")
        println("allocations: JavaCPP maxBytes ${Pointer.maxBytes()}, maxPhysicalBytes ${Pointer.maxPhysicalBytes()}, totalBytes ${Pointer.totalBytes()} at the start")
        var failed = 0
        suspend fun check(name: String, body: suspend () -> String) {
            val before = Pointer.totalBytes()
            val line = try {
                val what = body()
                val after = Pointer.totalBytes()
                if (after == before) "ok      $name: $what; JavaCPP's totalBytes unchanged ($before)"
                else { failed++; "FAILED  $name: $what, but JavaCPP's totalBytes went from $before to $after" }
            } catch (t: Throwable) {
                failed++
                "FAILED  $name: ${t.javaClass.name}: ${t.message}"
            }
            println("allocations: $line")
        }
        check("100 x ncclGetUniqueId") {
            val api = JavaCppNcclApi()
            val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES)
            repeat(100) { check(api.getUniqueId(id) == 0) { "ncclGetUniqueId failed" } }
            "100 ids"
        }
        var comm: dev.tpcomm.Communicator? = null
        check("Comm.create(\"nccl\") (ncclCommInitRankConfig)") {
            comm = Comm.create("nccl", config)
            "rank ${comm!!.rank} of ${comm!!.worldSize} on ${comm!!.device}"
        }
        val parent = comm
        if (parent != null) {
            check("split(0) (ncclCommSplit) and an all-reduce on the child") {
                val child = parent.split(0, parent.rank) ?: error("split(0) returned null")
                child.use {
                    val copies = DeviceCopies(JavaCppPlatform.runtime(), it.device)
                    val t = copies.upload(Tensor.of(floatArrayOf(1f, 2f)))
                    it.allReduce(t, ReduceOp.Sum)
                    val r = copies.download(t).toFloatArray().toList()
                    check(r == listOf(1f * it.worldSize, 2f * it.worldSize)) { "all-reduce gave $r" }
                    "child of ${it.worldSize}, all-reduce gave $r"
                }
            }
            check("close") { parent.close(); "closed" }
        }
        println("allocations: ${if (failed == 0) "passed" else "$failed check(s) FAILED"}")
        return failed
    }
}
