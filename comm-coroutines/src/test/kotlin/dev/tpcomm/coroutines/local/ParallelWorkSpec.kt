package dev.tpcomm.coroutines.local

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.shouldBe
import java.util.concurrent.atomic.AtomicIntegerArray
import java.util.concurrent.atomic.AtomicReferenceArray

/**
 * [ParallelWork], the splitting of the in-process backend's big kernels between the calling thread
 * and the [KernelPool] helpers: every piece runs once, and the caller's pieces are one contiguous
 * run from the first (the helpers take theirs from the last down), so that each thread works on the
 * same part of the buffers from one call to the next and finds it in its core's cache (issue 37:
 * 1 MiB all-reduce of 4 ranks, 0.79x).
 */
class ParallelWorkSpec : FunSpec({
    test("every piece runs exactly once; the caller's pieces are a prefix, the helpers' the rest") {
        val caller = Thread.currentThread()
        repeat(200) { round ->
            val units = 16 + round % 50
            val runs = AtomicIntegerArray(units)
            val by = AtomicReferenceArray<Thread>(units)
            object : ParallelWork(units) {
                override fun runUnit(unit: Int) {
                    runs.incrementAndGet(unit)
                    by.set(unit, Thread.currentThread())
                    // Long enough that a helper, awake or woken, takes some pieces.
                    val until = System.nanoTime() + 20_000
                    while (System.nanoTime() < until) Thread.onSpinWait()
                }
            }.execute(ParallelWork.parallelism - 1)
            (0 until units).filter { runs.get(it) != 1 }.shouldBeEmpty()
            val mine = (0 until units).filter { by.get(it) === caller }
            mine shouldBe (0 until mine.size).toList()
        }
    }

    test("without helpers the caller runs every piece in order") {
        val order = mutableListOf<Int>()
        object : ParallelWork(7) {
            override fun runUnit(unit: Int) { order += unit }
        }.execute(0)
        order shouldBe (0 until 7).toList()
    }

    test("a piece's exception is rethrown after every piece ended") {
        val runs = AtomicIntegerArray(40)
        shouldThrow<IllegalStateException> {
            object : ParallelWork(40) {
                override fun runUnit(unit: Int) {
                    runs.incrementAndGet(unit)
                    if (unit == 5) throw IllegalStateException("piece 5")
                }
            }.execute(ParallelWork.parallelism - 1)
        }.message shouldBe "piece 5"
        (0 until 40).filter { runs.get(it) != 1 }.shouldBeEmpty()
    }
})
