package dev.tpcomm

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlin.time.Duration.Companion.seconds

class CommConfigSpec : FunSpec({
    test("no launcher variables: a world of one") {
        CommConfig.fromEnvironment(emptyMap()) shouldBe CommConfig()
    }

    test("torchrun, Open MPI, MPICH and Slurm variables are read") {
        CommConfig.fromEnvironment(mapOf("RANK" to "2", "WORLD_SIZE" to "4", "LOCAL_RANK" to "0")).let {
            it.rank shouldBe 2; it.worldSize shouldBe 4; it.localRank shouldBe 0
        }
        CommConfig.fromEnvironment(mapOf("OMPI_COMM_WORLD_RANK" to "1", "OMPI_COMM_WORLD_SIZE" to "3")).let {
            it.rank shouldBe 1; it.worldSize shouldBe 3; it.localRank shouldBe 1
        }
        CommConfig.fromEnvironment(mapOf("PMI_RANK" to "0", "PMI_SIZE" to "2")).worldSize shouldBe 2
        CommConfig.fromEnvironment(mapOf("SLURM_PROCID" to "5", "SLURM_NTASKS" to "8", "SLURM_LOCALID" to "1")).localRank shouldBe 1
    }

    test("tpcomm variables set timeout, consistency checks and rendezvous") {
        val c = CommConfig.fromEnvironment(mapOf("TPCOMM_TIMEOUT_SECONDS" to "30", "TPCOMM_CHECK_CONSISTENCY" to "1", "TPCOMM_RENDEZVOUS" to "file:///tmp/x"))
        c.timeout shouldBe 30.seconds
        c.checkConsistency shouldBe true
        c.rendezvous shouldBe "file:///tmp/x"
    }

    test("creationTimeout: the longer of timeout and 5 minutes unless set; TPCOMM_CREATION_TIMEOUT_SECONDS sets it; non-positive values are refused") {
        CommConfig().effectiveCreationTimeout shouldBe kotlin.time.Duration.parse("10m")
        CommConfig(timeout = 1.seconds).effectiveCreationTimeout shouldBe CommConfig.DEFAULT_CREATION_TIMEOUT
        CommConfig(timeout = 1.seconds, creationTimeout = 30.seconds).effectiveCreationTimeout shouldBe 30.seconds
        // Shorter than the operation timeout is the caller's choice, and kept.
        CommConfig(creationTimeout = 2.seconds).effectiveCreationTimeout shouldBe 2.seconds
        CommConfig.builder().creationTimeout(java.time.Duration.ofSeconds(7)).build().creationTimeout shouldBe 7.seconds
        CommConfig.builder().timeout(java.time.Duration.ofSeconds(1)).build().javaEffectiveCreationTimeout shouldBe java.time.Duration.ofMinutes(5)
        CommConfig.fromEnvironment(mapOf("TPCOMM_CREATION_TIMEOUT_SECONDS" to "90")).creationTimeout shouldBe 90.seconds
        shouldThrow<IllegalArgumentException> { CommConfig.fromEnvironment(mapOf("TPCOMM_CREATION_TIMEOUT_SECONDS" to "0")) }.message shouldContain "TPCOMM_CREATION_TIMEOUT_SECONDS"
        shouldThrow<IllegalArgumentException> { CommConfig(creationTimeout = kotlin.time.Duration.ZERO) }.message shouldContain "creationTimeout"
    }

    test("TPCOMM_CHECK_CONSISTENCY accepts true/false/1/0/yes/no/on/off in any case and refuses anything else") {
        for (v in listOf("true", "TRUE", "1", "yes", "Yes", "on", "ON", " true ")) {
            CommConfig.fromEnvironment(mapOf("TPCOMM_CHECK_CONSISTENCY" to v)).checkConsistency shouldBe true
        }
        for (v in listOf("false", "False", "0", "no", "NO", "off", "Off")) {
            CommConfig.fromEnvironment(mapOf("TPCOMM_CHECK_CONSISTENCY" to v)).checkConsistency shouldBe false
        }
        for (v in listOf("", "2", "y", "enabled", "tru")) {
            val e = shouldThrow<IllegalArgumentException> { CommConfig.fromEnvironment(mapOf("TPCOMM_CHECK_CONSISTENCY" to v)) }
            e.message shouldContain "TPCOMM_CHECK_CONSISTENCY=\"$v\""
            e.message shouldContain "true, false, 1, 0, yes, no, on, off"
        }
    }

    test("bad values fail with the variable named") {
        shouldThrow<IllegalArgumentException> { CommConfig.fromEnvironment(mapOf("RANK" to "x", "WORLD_SIZE" to "2")) }.message shouldContain "RANK=\"x\""
        shouldThrow<IllegalArgumentException> { CommConfig.fromEnvironment(mapOf("RANK" to "4", "WORLD_SIZE" to "4")) }.message shouldContain "inconsistent"
        shouldThrow<IllegalArgumentException> { CommConfig(worldSize = 0) }
        shouldThrow<IllegalArgumentException> { CommConfig(worldSize = 2, rank = 2) }
        shouldThrow<IllegalArgumentException> { CommConfig(timeout = 0.seconds) }
    }

    test("the Java builder and java.time conversions") {
        val c = CommConfig.builder().worldSize(4).rank(3).timeout(java.time.Duration.ofSeconds(5)).checkConsistency(true).option("k", "v").build()
        c.worldSize shouldBe 4; c.rank shouldBe 3; c.timeout shouldBe 5.seconds; c.options shouldBe mapOf("k" to "v")
        c.javaTimeout shouldBe java.time.Duration.ofSeconds(5)
        c.withTimeout(java.time.Duration.ofMillis(1500)).timeout.inWholeMilliseconds shouldBe 1500
        c.toBuilder().rank(0).build().rank shouldBe 0
    }
})
