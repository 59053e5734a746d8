@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.nccl

import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.nccl.javacpp.JavaCppNcclApi
import dev.tpcomm.nccl.javacpp.RawPointer
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeGreaterThan
import io.kotest.matchers.shouldBe
import org.bytedeco.javacpp.BytePointer
import org.bytedeco.javacpp.IntPointer
import org.bytedeco.javacpp.Pointer
import org.bytedeco.javacpp.PointerPointer
import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout

/**
 * Issue 35, finding 7 (the binding's case of comm-gpu's `GpuLifetimesSpec`): an init or split must
 * not fail with an `OutOfMemoryError` from JavaCPP's physical-memory guard, so its per-call
 * `ncclUniqueId`, `ncclConfig_t` and net name are not JavaCPP allocations (which count against
 * `Pointer.maxBytes` and check `Pointer.maxPhysicalBytes`) but `java.lang.foreign` memory seen through
 * JavaCPP's cast constructors ([RawPointer], `BytePointer(Pointer)`, `PointerPointer(Pointer)`), owned
 * by the engine's arenas for as long as the library may use it.
 *
 * The first three cases need only JavaCPP's own native library (`jnijavacpp`, in the javacpp
 * `linux-x86_64` jar), not `libnccl.so.2` or a driver, so they run on every machine: they check the
 * rules the binding relies on, on the same wrappers it builds. The last needs `libnccl.so.2` and the
 * JavaCPP CUDA natives and is skipped where they do not load (the GPU bundle runs it).
 */
class JavaCppAllocationsTest : FunSpec({
    // Pointer's static initialiser loads jnijavacpp (Loader.load() with no argument would load the caller's own library).
    val javacpp = runCatching { BytePointer(1L).close() }.isSuccess
    val loads = runCatching { org.bytedeco.javacpp.Loader.load(org.bytedeco.cuda.global.nccl::class.java) }.isSuccess

    test("finding 7: foreign memory seen through JavaCPP's cast constructors counts nothing against Pointer.totalBytes (an allocating constructor does)").config(enabled = javacpp) {
        val before = Pointer.totalBytes()
        repeat(10_000) {
            Arena.ofConfined().use { a ->
                val id = a.allocate(NcclConnector.UNIQUE_ID_BYTES.toLong(), 8)
                val name = a.allocateFrom("mlx5_0")
                BytePointer(RawPointer(id.address())).capacity(NcclConnector.UNIQUE_ID_BYTES.toLong())
                BytePointer(RawPointer(name.address())).string shouldBe "mlx5_0"
                IntPointer(RawPointer(id.address())).put(0L, 7)
                PointerPointer<Pointer>(RawPointer(id.address()))
            }
        }
        Pointer.totalBytes() shouldBe before
        // The control: the measurement sees an allocating constructor.
        val allocated = BytePointer(1L shl 20)
        try {
            (Pointer.totalBytes() - before) shouldBeGreaterThan 0L
        } finally {
            allocated.close()
        }
    }

    test("finding 7: JavaCPP never frees the foreign memory it wraps; it stays the arena's until the arena closes, however the wrapper ends").config(enabled = javacpp) {
        Arena.ofConfined().use { a ->
            val config = a.allocate(64, 8)
            val ints = IntPointer(RawPointer(config.address()))
            for (i in 0L until 16L) ints.put(i, 1000 + i.toInt())
            // -1: no deallocator registered, so nothing for JavaCPP's GC thread (or close) to free; an allocation has one.
            ints.referenceCount() shouldBe -1
            IntPointer(4L).use { (it.referenceCount() >= 0) shouldBe true }
            ints.close() // ends the wrapper only
            BytePointer(RawPointer(config.address())).deallocate()
            System.gc()
            Thread.sleep(100)
            (0 until 16).map { config.getAtIndex(ValueLayout.JAVA_INT, it.toLong()) } shouldBe (0 until 16).map { 1000 + it }
        }
    }

    test("finding 7: what the library writes through a PointerPointer over the engine's cell lands in that cell, which outlives the wrapper").config(enabled = javacpp) {
        // NcclConnector's and SplitOnDevice's ncclComm_t* cells: NCCL's init and split jobs write them after the call returned.
        val cell = Arena.ofShared()
        try {
            val out = cell.allocate(ValueLayout.JAVA_LONG)
            out.set(ValueLayout.JAVA_LONG, 0, 0L)
            PointerPointer<Pointer>(RawPointer(out.address())).use { pp -> pp.put(0L, RawPointer(0x7f00_1234_5678L)) }
            System.gc()
            out.get(ValueLayout.JAVA_LONG, 0) shouldBe 0x7f00_1234_5678L
        } finally {
            cell.close()
        }
    }

    test("finding 7: ncclGetUniqueId allocates nothing through JavaCPP's accounting").config(enabled = loads) {
        val api = JavaCppNcclApi()
        val before = Pointer.totalBytes()
        val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES)
        repeat(100) { api.getUniqueId(id) }
        Pointer.totalBytes() shouldBe before
    }
})
