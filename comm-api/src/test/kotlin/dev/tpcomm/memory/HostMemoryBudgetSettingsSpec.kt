package dev.tpcomm.memory

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain

class HostMemoryBudgetSettingsSpec : FunSpec({
    test("sizes: bytes, k/m/g/t in powers of 1024 with optional b or ib, decimals, unlimited; anything else refused") {
        val s = HostMemoryBudgetSettings
        s.parseSize("1073741824") shouldBe (1L shl 30)
        s.parseSize("1g") shouldBe (1L shl 30)
        s.parseSize("1G") shouldBe (1L shl 30)
        s.parseSize("512m") shouldBe (512L shl 20)
        s.parseSize("512MB") shouldBe (512L shl 20)
        s.parseSize("1.5GiB") shouldBe (3L shl 29)
        s.parseSize(" 64k ") shouldBe (64L shl 10)
        s.parseSize("2t") shouldBe (2L shl 40)
        s.parseSize("unlimited") shouldBe Long.MAX_VALUE
        for (bad in listOf("", "abc", "-1g", "0", "1x", "1 gb extra", "99999999999999999999", "9000000000000g")) s.parseSize(bad) shouldBe null
    }

    test("the property wins over the environment variable, which wins over -XX:MaxDirectMemorySize and the machine") {
        val s = HostMemoryBudgetSettings
        s.resolve("2g", "1g", 512L shl 20, 8L shl 30, 16L shl 30).let { it.bytes shouldBe (2L shl 30); it.source shouldBe "-Dtpcomm.memory.budget=2g" }
        s.resolve(null, "1g", 512L shl 20, 8L shl 30, 16L shl 30).let { it.bytes shouldBe (1L shl 30); it.source shouldBe "TPCOMM_MEMORY_BUDGET=1g" }
        s.resolve(" ", null, 512L shl 20, 8L shl 30, 16L shl 30).let { it.bytes shouldBe (512L shl 20); it.source shouldBe "-XX:MaxDirectMemorySize=512.0 MiB" }
    }

    test("without settings: half of the smaller of the cgroup limit and physical memory") {
        val s = HostMemoryBudgetSettings
        s.resolve(null, null, null, 8L shl 30, 16L shl 30).let { it.bytes shouldBe (4L shl 30); it.source shouldContain "cgroup" }
        s.resolve(null, null, null, null, 16L shl 30).let { it.bytes shouldBe (8L shl 30); it.source shouldContain "physical memory" }
        s.resolve(null, null, null, 32L shl 30, 16L shl 30).let { it.bytes shouldBe (8L shl 30); it.source shouldContain "physical memory" }
        s.resolve(null, null, null, null, null).bytes shouldBe Long.MAX_VALUE
    }

    test("a value that is not a size is an error naming the setting and the expected form") {
        val r = HostMemoryBudgetSettings.resolve(null, "lots", null, null, 16L shl 30)
        r.error shouldNotBe null
        r.error!! shouldContain "TPCOMM_MEMORY_BUDGET='lots' is not a memory size"
        r.error!! shouldContain "512m or 1g"
    }

    test("this JVM's default comes from somewhere and is positive") {
        val r = HostMemoryBudgetSettings.fromEnvironment()
        (r.bytes > 0) shouldBe true
        r.source.isNotEmpty() shouldBe true
    }
})
