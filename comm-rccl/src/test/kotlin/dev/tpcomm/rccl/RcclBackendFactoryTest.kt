package dev.tpcomm.rccl

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/** On this machine (no ROCm) rccl must report unavailable with what to install, and refuse to create; nccl is not on an AMD classpath at all. */
class RcclBackendFactoryTest : FunSpec({
    test("rccl is found by ServiceLoader with priority 90; nccl's factory is not on comm-rccl's classpath (comm-gpu holds the engine)") {
        val backends = Comm.backends()
        backends.single { it.name == "rccl" }.priority shouldBe 90
        backends.none { it.name == "nccl" } shouldBe true
    }

    test("rccl is unavailable here, naming the library that did not open and how to install ROCm") {
        val f = RcclBackendFactory()
        f.isAvailable() shouldBe false
        val reason = f.unavailableReason()!!
        reason shouldContain "libamdhip64.so"
        reason shouldContain "could not be opened"
        reason shouldContain "hip-runtime-amd rccl"
        val e = shouldThrow<BackendUnavailableException> { f.create(CommConfig()) }
        e.backend shouldBe "rccl"
        e.message!! shouldContain "Install ROCm"
    }

    test("Comm.create(\"auto\") skips the unavailable GPU backend") {
        // "auto" falls through to a CPU backend (comm-coroutines' local backend is on this classpath).
        val auto = Comm.create("auto", CommConfig())
        (auto.backendName in setOf("nccl", "rccl")) shouldBe false
        auto.close()
    }

    test("bad rccl.* options are refused with what to change") {
        shouldThrow<IllegalArgumentException> { RcclBackendFactory().create(CommConfig(options = mapOf("rccl.algorithm" to "nvls"))) }
            .message shouldContain "ring or tree"
    }
})
