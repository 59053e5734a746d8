package dev.tpcomm.coroutines

import dev.tpcomm.engine.SpinSetting
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe

/** Every spin setting (`TPCOMM_GPU_IDLE_SPIN_US`, `TPCOMM_GPU_CALLER_SPIN_US`, `TPCOMM_MPI_HANDOFF_SPIN_US`) reads its value the same way. */
class SpinSettingSpec : FunSpec({
    test("microseconds become nanoseconds; unset, empty or garbage give the default") {
        SpinSetting.nanos("20", defaultMicros = 50) shouldBe 20_000L
        SpinSetting.nanos(" 7 ", defaultMicros = 50) shouldBe 7_000L
        SpinSetting.nanos(null, defaultMicros = 50) shouldBe 50_000L
        SpinSetting.nanos("", defaultMicros = 50) shouldBe 50_000L
        SpinSetting.nanos("20us", defaultMicros = 0) shouldBe 0L
    }

    test("values are clamped to 0..10,000 microseconds") {
        SpinSetting.nanos("-5", defaultMicros = 50) shouldBe 0L
        SpinSetting.nanos("0", defaultMicros = 50) shouldBe 0L
        SpinSetting.nanos("999999", defaultMicros = 50) shouldBe SpinSetting.MAX_MICROS * 1_000L
    }
})
