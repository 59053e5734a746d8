@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.nccl

import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.nccl.javacpp.JavaCppNcclApi
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import org.bytedeco.javacpp.Pointer

/**
 * Issue 35, finding 7 (the binding's case of comm-gpu's `GpuLifetimesSpec`): an init or split must
 * not fail with an `OutOfMemoryError` from JavaCPP's physical-memory guard, so its per-call
 * `ncclUniqueId`, `ncclConfig_t` and net name are not JavaCPP allocations (which count against
 * `Pointer.maxBytes` and check `Pointer.maxPhysicalBytes`). Needs `libnccl.so.2` and the JavaCPP
 * CUDA natives: skipped where they do not load (this machine has no GPU, so the case did not run
 * here; the GPU bundle runs it).
 */
class JavaCppAllocationsTest : FunSpec({
    val loads = runCatching { org.bytedeco.javacpp.Loader.load(org.bytedeco.cuda.global.nccl::class.java) }.isSuccess

    test("finding 7: ncclGetUniqueId allocates nothing through JavaCPP's accounting").config(enabled = loads) {
        val api = JavaCppNcclApi()
        val before = Pointer.totalBytes()
        val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES)
        repeat(100) { api.getUniqueId(id) }
        Pointer.totalBytes() shouldBe before
    }
})
