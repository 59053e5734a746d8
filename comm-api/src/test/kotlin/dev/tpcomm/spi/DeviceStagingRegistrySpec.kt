package dev.tpcomm.spi

import dev.tpcomm.Device
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContain
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.MemorySegment
import java.util.concurrent.CountDownLatch
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit

/** A staging that copies nothing; [accepted] says which devices it claims. */
class NamedStaging(override val name: String, private val accepted: (Device) -> Boolean) : DeviceStaging {
    override fun accepts(device: Device): Boolean = accepted(device)
    override fun copyToHost(device: Device, source: Long, destination: MemorySegment, bytes: Long) = error("not used")
    override fun copyToDevice(device: Device, source: MemorySegment, destination: Long, bytes: Long) = error("not used")
}

/** Listed in this module's test META-INF/services: offers a staging for ROCm devices. */
class DiscoveredRocmStaging : DeviceStagingProvider {
    override fun create(): DeviceStaging = NamedStaging("discovered rocm") { it is Device.Rocm }
}

/** Listed too: not available here. */
class AbsentStaging : DeviceStagingProvider {
    override fun create(): DeviceStaging? = null
}

/** Listed too: says why it is not available by throwing. */
class FailingStaging : DeviceStagingProvider {
    override fun create(): DeviceStaging = throw IllegalStateException("libfake.so is missing; install fake-runtime")
}

class DeviceStagingRegistrySpec : FunSpec({
    test("providers on the classpath are discovered; unavailable ones and broken entries are reported, not thrown") {
        DeviceStagingRegistry.find(Device.Rocm(3))?.name shouldBe "discovered rocm"
        DeviceStagingRegistry.find(Device.Cuda(0)) shouldBe null
        DeviceStagingRegistry.find(Device.Host) shouldBe null
        val notes = DeviceStagingRegistry.unavailable
        notes shouldHaveSize 3
        notes shouldContain "dev.tpcomm.spi.AbsentStaging: not available here"
        notes shouldContain "dev.tpcomm.spi.FailingStaging: IllegalStateException: libfake.so is missing; install fake-runtime"
        notes.joinToString() shouldContain "NoSuchProviderClass"
    }

    test("the most recently registered accepting staging wins, over discovered ones too; close unregisters once") {
        val cuda = NamedStaging("cuda") { it is Device.Cuda }
        val any = NamedStaging("any gpu") { it.isGpu }
        val r1 = DeviceStagingRegistry.register(cuda)
        DeviceStagingRegistry.find(Device.Cuda(1)) shouldBe cuda
        DeviceStagingRegistry.find(Device.Rocm(0))?.name shouldBe "discovered rocm"
        val r2 = DeviceStagingRegistry.register(any)
        DeviceStagingRegistry.find(Device.Cuda(1)) shouldBe any
        DeviceStagingRegistry.find(Device.Rocm(0)) shouldBe any
        DeviceStagingRegistry.find(Device.Host) shouldBe null
        val r3 = DeviceStagingRegistry.register(cuda)
        DeviceStagingRegistry.find(Device.Cuda(1)) shouldBe cuda
        r3.close()
        DeviceStagingRegistry.find(Device.Cuda(1)) shouldBe any
        r2.close()
        r2.close()
        DeviceStagingRegistry.find(Device.Cuda(1)) shouldBe cuda
        DeviceStagingRegistry.find(Device.Rocm(0))?.name shouldBe "discovered rocm"
        r1.close()
        DeviceStagingRegistry.find(Device.Cuda(1)) shouldBe null
    }

    test("concurrent registration, lookup and removal from many threads") {
        val pool = Executors.newFixedThreadPool(4)
        val start = CountDownLatch(1)
        val failures = java.util.concurrent.ConcurrentLinkedQueue<Throwable>()
        repeat(4) { t ->
            pool.execute {
                try {
                    start.await()
                    val mine = NamedStaging("t$t") { it == Device.Cuda(10 + t) }
                    repeat(2_000) {
                        DeviceStagingRegistry.register(mine).use {
                            check(DeviceStagingRegistry.find(Device.Cuda(10 + t)) === mine) { "thread $t lost its registration" }
                        }
                    }
                } catch (e: Throwable) {
                    failures += e
                }
            }
        }
        start.countDown()
        pool.shutdown()
        pool.awaitTermination(60, TimeUnit.SECONDS) shouldBe true
        failures.toList() shouldBe emptyList()
        (10..13).map { DeviceStagingRegistry.find(Device.Cuda(it)) } shouldBe listOf(null, null, null, null)
    }
})
