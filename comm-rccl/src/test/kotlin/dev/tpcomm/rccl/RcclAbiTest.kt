package dev.tpcomm.rccl

import dev.tpcomm.gpu.NcclCommConfig
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.lang.foreign.Arena
import java.lang.foreign.MemoryLayout.PathElement.groupElement
import java.lang.foreign.ValueLayout

/** The ncclConfig_t and ncclUniqueId layouts of ROCm/rccl's src/nccl.h.in (ncclConfig_v21700) on LP64. */
class RcclAbiTest : FunSpec({
    test("ncclConfig_v21700 offsets and size") {
        val l = RcclAbi.CONFIG_LAYOUT
        l.byteSize() shouldBe 48
        listOf("size", "magic", "version", "blocking", "cgaClusterSize", "minCTAs", "maxCTAs", "netName", "splitShare", "trafficClass")
            .map { l.byteOffset(groupElement(it)) } shouldBe listOf(0L, 8, 12, 16, 20, 24, 28, 32, 40, 44)
        RcclAbi.UNIQUE_ID_LAYOUT.byteSize() shouldBe 128
    }

    test("a filled config is NCCL_CONFIG_INITIALIZER plus the engine's fields") {
        Arena.ofConfined().use { a ->
            val s = RcclAbi.config(NcclCommConfig(blocking = false, maxCtas = 16, netName = "IB"), a)
            s.get(ValueLayout.JAVA_LONG, 0) shouldBe 48L
            s.get(ValueLayout.JAVA_INT, 8) shouldBe 0xcafebeef.toInt()
            s.get(ValueLayout.JAVA_INT, 12) shouldBe 21700
            s.get(ValueLayout.JAVA_INT, 16) shouldBe 0
            s.get(ValueLayout.JAVA_INT, 20) shouldBe Int.MIN_VALUE
            s.get(ValueLayout.JAVA_INT, 24) shouldBe Int.MIN_VALUE
            s.get(ValueLayout.JAVA_INT, 28) shouldBe 16
            s.get(ValueLayout.ADDRESS, 32).reinterpret(3).getString(0) shouldBe "IB"
            s.get(ValueLayout.JAVA_INT, 40) shouldBe Int.MIN_VALUE
            s.get(ValueLayout.JAVA_INT, 44) shouldBe Int.MIN_VALUE
            RcclAbi.config(NcclCommConfig(blocking = true, splitShare = true), a).let {
                it.get(ValueLayout.JAVA_INT, 16) shouldBe 1
                it.get(ValueLayout.ADDRESS, 32).address() shouldBe 0L
                it.get(ValueLayout.JAVA_INT, 40) shouldBe 1
            }
        }
    }
})
