package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.launch
import kotlinx.coroutines.sync.Semaphore
import java.util.concurrent.atomic.AtomicInteger
import kotlin.random.Random

/**
 * The soak: many small random collectives issued in program order with many in flight at once.
 *
 * Every rank draws the same sequence of single-call collectives (all kinds, dtypes and ops the
 * backend supports, up to a few hundred elements) from the seed, and issues each from its own
 * coroutine started with `CoroutineStart.UNDISPATCHED`, keeping at most `concurrency` in flight;
 * every result is checked against the reference. A backend that does not enqueue synchronously
 * before suspending breaks program order and fails with mismatches.
 */
public object ConformanceSoak {
    private const val SALT = 0x50A4L

    /**
     * Runs [collectives] collectives on [comm] with at most [concurrency] in flight, recording
     * every wrong result in [ctx]. Every rank must call it with the same arguments and seed.
     * Throws what a collective throws (after cancelling the others in flight).
     */
    public suspend fun run(comm: Communicator, ctx: CaseContext, collectives: Int = ctx.options.soakCollectives, concurrency: Int = ctx.options.soakConcurrency) {
        require(collectives >= 0 && concurrency >= 1) { "soak needs collectives >= 0 and concurrency >= 1, got $collectives and $concurrency" }
        val random = Random(TestData.mix(ctx.seed, SALT, 0))
        val permits = Semaphore(concurrency)
        val done = AtomicInteger()
        coroutineScope {
            repeat(collectives) {
                val scenario = ScenarioGenerator.next(random, comm.worldSize, ctx.options, maxElements = 256, multiCall = false)
                permits.acquire()
                launch(start = CoroutineStart.UNDISPATCHED) {
                    try {
                        ScenarioRunner.run(comm, scenario, ctx)
                        done.incrementAndGet()
                    } finally {
                        permits.release()
                    }
                }
            }
        }
        ctx.expect(done.get() == collectives) { "soak: ${done.get()} of $collectives collectives completed" }
    }
}
