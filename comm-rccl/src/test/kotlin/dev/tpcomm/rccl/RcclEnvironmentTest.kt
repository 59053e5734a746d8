package dev.tpcomm.rccl

import dev.tpcomm.gpu.NativeEnvironment
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

class RcclEnvironmentTest : FunSpec({
    test("ring or tree, channels, debug and buffer size map to the variables RCCL reads") {
        val c = RcclEnvironment.fromOptions(
            mapOf("rccl.algorithm" to "tree", "rccl.channels" to "4", "rccl.debug" to "info", "rccl.bufferSize" to "8388608", "rccl.env.RCCL_MSCCL_ENABLE" to "0", "nccl.debug" to "ignored"),
        )
        c.environment() shouldBe mapOf(
            "NCCL_ALGO" to "Tree", "NCCL_MIN_NCHANNELS" to "4", "NCCL_MAX_NCHANNELS" to "4", "NCCL_DEBUG" to "INFO",
            "NCCL_BUFFSIZE" to "8388608", "RCCL_MSCCL_ENABLE" to "0",
        )
        RcclEnvironment.fromOptions(mapOf("rccl.algorithm" to "Ring")).environment() shouldBe mapOf("NCCL_ALGO" to "Ring")
    }

    test("malformed values and unknown keys are refused") {
        shouldThrow<IllegalArgumentException> { RcclEnvironment.fromOptions(mapOf("rccl.channels" to "0")) }.message shouldContain "1..64"
        shouldThrow<IllegalArgumentException> { RcclEnvironment.fromOptions(mapOf("rccl.debug" to "LOUD")) }.message shouldContain "VERSION"
        shouldThrow<IllegalArgumentException> { RcclEnvironment.fromOptions(mapOf("rccl.chanels" to "2")) }.message shouldContain "known: rccl.algorithm"
    }

    test("apply sets them with setenv") {
        RcclEnvironment(extra = mapOf("TPCOMM_TEST_RCCL_VAR" to "42"), overwrite = true).apply()
        NativeEnvironment.get("TPCOMM_TEST_RCCL_VAR") shouldBe "42"
    }
})
