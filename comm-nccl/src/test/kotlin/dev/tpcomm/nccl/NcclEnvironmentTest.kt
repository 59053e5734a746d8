package dev.tpcomm.nccl

import dev.tpcomm.gpu.NativeEnvironment
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

class NcclEnvironmentTest : FunSpec({
    test("options map to NCCL's own environment variables") {
        val c = NcclEnvironment.fromOptions(
            mapOf(
                "nccl.debug" to "INFO", "nccl.debugSubsys" to "INIT,COLL", "nccl.algo" to "Ring", "nccl.proto" to "Simple",
                "nccl.socketIfname" to "eth0", "nccl.ibDisable" to "true", "nccl.p2pDisable" to "0", "nccl.minChannels" to "2",
                "nccl.maxChannels" to "8", "nccl.buffsize" to "4194304", "nccl.device" to "1", "nccl.env.NCCL_NET_GDR_LEVEL" to "PHB",
                "mpi.something" to "ignored",
            ),
        )
        c.device shouldBe 1
        c.environment() shouldBe mapOf(
            "NCCL_DEBUG" to "INFO", "NCCL_DEBUG_SUBSYS" to "INIT,COLL", "NCCL_ALGO" to "Ring", "NCCL_PROTO" to "Simple",
            "NCCL_SOCKET_IFNAME" to "eth0", "NCCL_IB_DISABLE" to "1", "NCCL_P2P_DISABLE" to "0", "NCCL_MIN_NCHANNELS" to "2",
            "NCCL_MAX_NCHANNELS" to "8", "NCCL_BUFFSIZE" to "4194304", "NCCL_NET_GDR_LEVEL" to "PHB",
        )
    }

    test("unknown keys and malformed values are refused with what to change") {
        shouldThrow<IllegalArgumentException> { NcclEnvironment.fromOptions(mapOf("nccl.dbug" to "INFO")) }.message shouldContain "known: nccl.debug"
        shouldThrow<IllegalArgumentException> { NcclEnvironment.fromOptions(mapOf("nccl.ibDisable" to "maybe")) }.message shouldContain "true or false"
        shouldThrow<IllegalArgumentException> { NcclEnvironment.fromOptions(mapOf("nccl.minChannels" to "8", "nccl.maxChannels" to "2")) }
            .message shouldContain "exceeds"
    }

    test("apply sets the variables in the C environment with setenv; a user's value is kept unless overwrite") {
        NativeEnvironment.set("TPCOMM_TEST_NCCL_ALGO", "Tree")
        NcclEnvironment(extra = mapOf("TPCOMM_TEST_NCCL_ALGO" to "Ring", "TPCOMM_TEST_NCCL_NEW" to "1")).apply()
        NativeEnvironment.get("TPCOMM_TEST_NCCL_ALGO") shouldBe "Tree"
        NativeEnvironment.get("TPCOMM_TEST_NCCL_NEW") shouldBe "1"
        NcclEnvironment(extra = mapOf("TPCOMM_TEST_NCCL_ALGO" to "Ring"), overwrite = true).apply()
        NativeEnvironment.get("TPCOMM_TEST_NCCL_ALGO") shouldBe "Ring"
        NativeEnvironment.get("TPCOMM_TEST_UNSET_VARIABLE") shouldBe null
    }
})
