package dev.tpcomm.testkit

import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.isActive
import kotlin.time.Duration

/** How a call ended: [error] is null when it returned normally. */
internal class Attempt(val error: Throwable?, val elapsedMillis: Long)

/**
 * Runs [block] and reports how it ended and how long it took. A cancellation of the calling
 * coroutine itself is rethrown (so runner timeouts still work); any other throwable is captured.
 */
internal suspend fun attempt(block: suspend () -> Unit): Attempt {
    val start = System.nanoTime()
    return try {
        block()
        Attempt(null, (System.nanoTime() - start) / 1_000_000)
    } catch (e: Throwable) {
        if (e is CancellationException && !currentCoroutineContext().isActive) throw e
        Attempt(e, (System.nanoTime() - start) / 1_000_000)
    }
}

/** [this] and its causes, outermost first. */
internal fun Throwable.chain(): List<Throwable> = generateSequence(this) { it.cause }.take(16).toList()

internal fun Throwable.describe(): String = "${this::class.qualifiedName}: $message"

/**
 * Records in [ctx] unless [result] failed with a throwable that [accept]s, within twice [timeout].
 */
internal fun expectFailure(
    ctx: CaseContext,
    what: String,
    result: Attempt,
    timeout: Duration,
    expected: String,
    accept: (Throwable) -> Boolean,
) {
    val e = result.error
    when {
        e == null -> ctx.fail("$what: the call returned normally after ${result.elapsedMillis} ms; expected $expected")
        !accept(e) -> ctx.fail("$what: expected $expected, got ${e.describe()}" + (e.cause?.let { " (cause ${it.describe()})" } ?: ""))
    }
    val limit = 2 * timeout.inWholeMilliseconds
    ctx.expect(result.elapsedMillis <= limit) {
        "$what: ended after ${result.elapsedMillis} ms, more than twice the timeout ($limit ms)"
    }
}
