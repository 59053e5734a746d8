package dev.tpcomm.gpu

import dev.tpcomm.DType
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import io.mockk.every
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration
import kotlin.time.Duration.Companion.seconds

/**
 * A device whose native thread is stuck in a driver call: the first event record on [p] blocks that
 * thread for [blockMillis] (whatever abort does). Every communicator of [p]'s device shares the thread.
 */
class BlockedDevice(private val blockMillis: Long = 3_000, val p: MockPlatform = MockPlatform()) {
    /** Counted down once the thread is stuck. */
    val blocked = CountDownLatch(1)
    private val first = AtomicInteger()

    init {
        every { p.runtime.eventRecord(any(), any()) } answers {
            if (first.getAndIncrement() == 0) { blocked.countDown(); CountDownLatch(1).await(blockMillis, TimeUnit.MILLISECONDS) }
            0
        }
    }

    /**
     * Connects a communicator of [worldSize] ranks with [timeout] (closed afterwards), sticks the
     * device's thread with another communicator's all-reduce (its own deadline 30 s), and runs [block]
     * with the first while the thread is stuck; returns once the stuck call ended too.
     */
    suspend fun whileStuck(worldSize: Int, timeout: Duration, block: suspend CoroutineScope.(NcclCommunicator) -> Unit) {
        val stuck = p.connect(timeout = 30.seconds)
        val c = p.connect(worldSize = worldSize, timeout = timeout)
        try {
            coroutineScope {
                val hung = async(Dispatchers.Default) { runCatching { stuck.allReduce(dev(A, DType.Float32, 4)) } }
                blocked.await()
                block(c)
                hung.await()
            }
        } finally {
            c.close()
            stuck.close()
        }
    }
}
