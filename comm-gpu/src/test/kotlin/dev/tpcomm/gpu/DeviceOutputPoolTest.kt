package dev.tpcomm.gpu

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.mockk.every
import io.mockk.mockk
import io.mockk.verify

/**
 * [DeviceOutputPool] and [RetiredStreams] against a mocked runtime: which runtime calls each rule
 * makes, including when the runtime refuses an event.
 */
class DeviceOutputPoolTest : FunSpec({
    fun runtime(): DeviceRuntime = mockk<DeviceRuntime>().also { r ->
        every { r.freeAsync(any(), any()) } returns 0
        every { r.streamDestroy(any()) } returns 0
        every { r.eventDestroy(any()) } returns 0
        every { r.eventRecord(any(), any()) } returns 0
        every { r.eventCreateDisableTiming(any()) } answers { firstArg<LongArray>()[0] = 0xE0; 0 }
    }

    test("sizes round up to 512 bytes") {
        DeviceOutputPool.blockSize(0) shouldBe 512
        DeviceOutputPool.blockSize(512) shouldBe 512
        DeviceOutputPool.blockSize(513) shouldBe 1024
    }

    test("a block given back is reused by its own stream and size only, with no runtime call") {
        val r = runtime()
        val pool = DeviceOutputPool(r)
        pool.allocated(1L)
        pool.give(0xA0, 1024, 1L) { error("not retired") } shouldBe 0L
        pool.cachedBytes shouldBe 1024
        pool.take(2L, 1024) shouldBe 0L // another stream: never without an event
        pool.take(1L, 512) shouldBe 0L // another size
        pool.take(1L, 1024) shouldBe 0xA0
        pool.cachedBytes shouldBe 0
        verify(exactly = 0) { r.freeAsync(any(), any()) }
    }

    test("with caching off (-Dtpcomm.memory.devicePool=false) a block given back is freed at once") {
        val r = runtime()
        val pool = DeviceOutputPool(r, caching = false)
        pool.allocated(1L)
        pool.give(0xA0, 1024, 1L) { error("not retired") } shouldBe 1024
        pool.cachedBytes shouldBe 0
        pool.take(1L, 1024) shouldBe 0L
        verify { r.freeAsync(0xA0, 1L) }
        System.setProperty(DeviceOutputPool.PROPERTY, "FALSE")
        try {
            DeviceOutputPool.cachingFromProperty() shouldBe false
        } finally {
            System.clearProperty(DeviceOutputPool.PROPERTY)
        }
        DeviceOutputPool.cachingFromProperty() shouldBe true
    }

    test("releaseIdle frees every cached block on its own stream and returns the bytes") {
        val r = runtime()
        val pool = DeviceOutputPool(r)
        pool.allocated(1L); pool.allocated(2L)
        pool.give(0xA0, 512, 1L) {}
        pool.give(0xB0, 1024, 2L) {}
        pool.releaseIdle() shouldBe 1536
        pool.cachedBytes shouldBe 0
        verify { r.freeAsync(0xA0, 1L); r.freeAsync(0xB0, 2L) }
        pool.take(1L, 512) shouldBe 0L
    }

    test("a retired stream: cached blocks freed at once, live ones freed when given back, unused after the last") {
        val r = runtime()
        val pool = DeviceOutputPool(r)
        val unused = ArrayList<Long>()
        pool.allocated(1L); pool.allocated(1L)
        pool.give(0xA0, 512, 1L) { unused += it }
        pool.retire(1L) { unused += it } shouldBe 512
        unused shouldBe emptyList()
        pool.take(1L, 512) shouldBe 0L
        pool.retiredInUse() shouldBe listOf(1L)
        pool.give(0xB0, 512, 1L) { unused += it } shouldBe 512 // freed, not cached
        unused shouldBe listOf(1L)
        pool.retiredInUse() shouldBe emptyList()
        pool.cachedBytes shouldBe 0
        verify { r.freeAsync(0xA0, 1L); r.freeAsync(0xB0, 1L) }
        pool.retire(7L) { unused += it } shouldBe 0 // a stream that never had an output: unused at once
        unused shouldBe listOf(1L, 7L)
    }

    test("retired streams are destroyed once their event completed or failed, at once when no event can be recorded") {
        val r = runtime()
        var state = DeviceRuntime.ERROR_NOT_READY
        every { r.eventQuery(0xE0) } answers { state }
        val retired = RetiredStreams(r)
        retired.add(0x51)
        retired.reap()
        retired.size shouldBe 1
        verify(exactly = 0) { r.streamDestroy(any()) }
        state = 719 // cudaErrorLaunchFailure: the stream's work ended with the error, nothing targets it
        retired.reap()
        retired.size shouldBe 0
        verify { r.eventDestroy(0xE0); r.streamDestroy(0x51) }

        every { r.eventCreateDisableTiming(any()) } returns 2
        retired.add(0x52)
        retired.size shouldBe 0
        verify { r.streamDestroy(0x52) }

        every { r.eventCreateDisableTiming(any()) } answers { firstArg<LongArray>()[0] = 0xE1; 0 }
        every { r.eventRecord(0xE1, 0x53) } returns 400
        retired.add(0x53)
        retired.size shouldBe 0
        verify { r.eventDestroy(0xE1); r.streamDestroy(0x53) }

        every { r.eventCreateDisableTiming(any()) } answers { firstArg<LongArray>()[0] = 0xE2; 0 }
        every { r.eventQuery(0xE2) } returns DeviceRuntime.ERROR_NOT_READY
        retired.add(0x54)
        retired.destroyAll()
        retired.size shouldBe 0
        verify { r.eventDestroy(0xE2); r.streamDestroy(0x54) }
    }
})
