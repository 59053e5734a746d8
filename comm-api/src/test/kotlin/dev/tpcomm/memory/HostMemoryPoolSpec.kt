package dev.tpcomm.memory

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeLessThanOrEqual
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.ValueLayout
import java.util.concurrent.CyclicBarrier
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit

class HostMemoryPoolSpec : FunSpec({
    test("size classes cover every pooled size, are 64-byte multiples and waste at most a quarter beyond 512 bytes") {
        for (i in 0 until SizeClasses.COUNT) {
            val size = SizeClasses.blockSize(i)
            (size % 64) shouldBe 0
            SizeClasses.indexOf(size) shouldBe i
            if (i > 0) SizeClasses.indexOf(SizeClasses.blockSize(i - 1) + 1) shouldBe i
        }
        SizeClasses.blockSize(SizeClasses.COUNT - 1) shouldBe SizeClasses.MAX_POOLED_BYTES
        SizeClasses.indexOf(0) shouldBe 0
        SizeClasses.indexOf(8) shouldBe 0
        for (bytes in listOf(513L, 1000L, 70_000L, 3_000_001L)) {
            val block = SizeClasses.blockSize(SizeClasses.indexOf(bytes))
            (block >= bytes) shouldBe true
            (block - bytes) shouldBeLessThanOrEqual bytes / 4
        }
    }

    test("a freed block is reused, zeroed when asked, and blocks are 64-byte aligned and disjoint") {
        val pool = HostMemoryPool()
        val a = pool.allocate(8)
        (a.segment.address() % 64) shouldBe 0
        a.segment.byteSize() shouldBe 8
        a.segment.set(ValueLayout.JAVA_LONG, 0, -1L)
        val b = pool.allocate(8)
        b.segment.address() shouldNotBe a.segment.address()
        val address = a.segment.address()
        a.run()
        val c = pool.allocate(8, zero = true)
        c.segment.address() shouldBe address
        c.segment.get(ValueLayout.JAVA_LONG, 0) shouldBe 0L
        c.segment.set(ValueLayout.JAVA_LONG, 0, 7L)
        c.run()
        pool.allocate(8, zero = false).segment.get(ValueLayout.JAVA_LONG, 0) shouldBe 7L // not cleared when the caller overwrites
        pool.blocksInUse() shouldBe 2
    }

    test("large requests get an arena of their own, unmapped when freed") {
        val pool = HostMemoryPool()
        val big = pool.allocate(SizeClasses.MAX_POOLED_BYTES + 1)
        (big is ArenaBlock) shouldBe true
        val seg = big.segment
        big.run()
        seg.scope().isAlive shouldBe false
        shouldThrow<IllegalStateException> { seg.get(ValueLayout.JAVA_BYTE, 0) }
        pool.blocksInUse() shouldBe 0
    }

    test("the pool keeps a bounded amount of free slabs and gives the rest back") {
        val pool = HostMemoryPool(retainBytes = 2L shl 20, classRetainBytes = 2L shl 20)
        val size = 64L shl 10 // 16 blocks per 1 MiB slab
        val cls = pool.sizeClassOf(size)
        val blocks = List(16 * 8) { pool.allocate(size) }
        cls.slabCount() shouldBe 8
        val segments = blocks.map { it.segment }
        blocks.forEach { it.run() }
        cls.blocksInUse() shouldBe 0
        cls.slabCount() shouldBe 2 // 2 MiB kept, 6 MiB given back
        pool.slabBytes() shouldBe (2L shl 20)
        segments.count { !it.scope().isAlive } shouldBe 16 * 6
        // What is kept is reused before anything new is mapped.
        List(32) { pool.allocate(size) }
        cls.slabCount() shouldBe 2
    }

    test("the pool off gives every block an arena of its own") {
        val pool = HostMemoryPool(enabled = false)
        val b = pool.allocate(8)
        (b is ArenaBlock) shouldBe true
        b.run()
        b.segment.scope().isAlive shouldBe false
    }

    test("threads allocating and freeing at once never share a live block") {
        val pool = HostMemoryPool(retainBytes = 1L shl 20, classRetainBytes = 256L shl 10)
        val threads = 4
        val rounds = 20_000
        val barrier = CyclicBarrier(threads)
        val exec = Executors.newFixedThreadPool(threads)
        val futures = (0 until threads).map { id ->
            exec.submit<Unit> {
                barrier.await()
                val rnd = java.util.Random(id.toLong())
                val live = ArrayDeque<Pair<HostBlock, Long>>()
                for (r in 0 until rounds) {
                    val bytes = 8L * (1 + rnd.nextInt(if (r % 100 == 0) 20_000 else 64))
                    val tag = (id.toLong() shl 40) or r.toLong()
                    val b = pool.allocate(bytes)
                    b.segment.get(ValueLayout.JAVA_LONG, 0) shouldBe 0L
                    b.segment.set(ValueLayout.JAVA_LONG, 0, tag)
                    b.segment.set(ValueLayout.JAVA_LONG, bytes - 8, tag)
                    live.addLast(b to tag)
                    if (live.size > 16 || rnd.nextBoolean()) {
                        val (old, oldTag) = live.removeFirst()
                        old.segment.get(ValueLayout.JAVA_LONG, 0) shouldBe oldTag
                        old.segment.get(ValueLayout.JAVA_LONG, old.segment.byteSize() - 8) shouldBe oldTag
                        old.run()
                    }
                }
                live.forEach { it.first.run() }
            }
        }
        futures.forEach { it.get(120, TimeUnit.SECONDS) }
        exec.shutdown()
        pool.blocksInUse() shouldBe 0
    }

    test("the budget counts whole slabs and large arenas, and gets every byte back when they are freed") {
        val pool = HostMemoryPool(budget = NativeMemoryBudget(64L shl 20, "test"))
        val small = List(100) { pool.allocate(64) } // 64-byte class: slabs of 1024 blocks (64 KiB)
        pool.budget.reserved() shouldBe (64L shl 10)
        val big = pool.allocate(5L shl 20)
        pool.budget.reserved() shouldBe (64L shl 10) + (5L shl 20)
        big.run()
        small.forEach { it.run() }
        pool.trimEmptySlabs(0)
        pool.budget.reserved() shouldBe 0L
        pool.slabBytes() shouldBe 0L
    }

    test("live blocks beyond the budget fail with NativeMemoryBudgetException naming the budget, the size classes and the fixes") {
        val pool = HostMemoryPool(budget = NativeMemoryBudget(8L shl 20, "-Dtpcomm.memory.budget=8m"))
        val held = List(8) { pool.allocate(1L shl 20) }
        val e = shouldThrow<dev.tpcomm.NativeMemoryBudgetException> { pool.allocate(1L shl 20) }
        e.budgetBytes shouldBe (8L shl 20)
        e.heldBytes shouldBe (8L shl 20)
        e.message!! shouldContain "budget of 8.0 MiB (from -Dtpcomm.memory.budget=8m)"
        e.message!! shouldContain "1.0 MiB blocks: 8 in use (8.0 MiB) in 8 slabs (8.0 MiB)"
        e.message!! shouldContain "close the tensors you no longer need"
        e.message!! shouldContain "TPCOMM_MEMORY_BUDGET=<size>"
        held[0].run()
        pool.allocate(1L shl 20).run() // usable again once memory was freed
        shouldThrow<dev.tpcomm.NativeMemoryBudgetException> { pool.allocate(9L shl 20) }.message!! shouldContain "needs 9.0 MiB more"
    }

    test("wholly free slabs kept for reuse go back to the system once idle, and free slabs of other classes are returned under pressure") {
        val pool = HostMemoryPool(budget = NativeMemoryBudget(4L shl 20, "test"), idleReleaseMillis = 250)
        List(64) { pool.allocate(1024) }.forEach { it.run() } // one 64 KiB slab of the 1 KiB class, kept free
        pool.slabBytes() shouldBe (64L shl 10)
        val deadline = System.nanoTime() + 10_000_000_000L
        // The trimmer thread drops the slab, then gives its bytes back to the budget: wait for both.
        while ((pool.slabBytes() > 0 || pool.budget.reserved() > 0) && System.nanoTime() < deadline) Thread.sleep(20)
        pool.slabBytes() shouldBe 0L
        pool.budget.reserved() shouldBe 0L
        // Under pressure: 4 MiB of free 1 MiB slabs are given back for a 256 KiB class.
        val pool2 = HostMemoryPool(budget = NativeMemoryBudget(4L shl 20, "test"), idleReleaseMillis = 0)
        List(4) { pool2.allocate(1L shl 20) }.forEach { it.run() }
        pool2.budget.reserved() shouldBe (4L shl 20)
        pool2.allocate(200_000).run()
        pool2.budget.reserved() shouldBe pool2.sizeClassOf(200_000).slabBytes
    }

    test("under pressure (over 3/4 of the budget) wholly free slabs are kept beyond the retain limits, for the allocations to come") {
        val tight = HostMemoryPool(retainBytes = 0, classRetainBytes = 0, budget = NativeMemoryBudget(4L shl 20, "test"), idleReleaseMillis = 0)
        List(4) { tight.allocate(1L shl 20) }.forEach { it.run() }
        tight.slabBytes() shouldBe (4L shl 20) // kept: 4 MiB counted > 3 MiB
        List(4) { tight.allocate(1L shl 20) }.forEach { it.run() } // reused, nothing new counted
        tight.budget.reserved() shouldBe (4L shl 20)
        val relaxed = HostMemoryPool(retainBytes = 0, classRetainBytes = 0, budget = NativeMemoryBudget(64L shl 20, "test"), idleReleaseMillis = 0)
        List(4) { relaxed.allocate(1L shl 20) }.forEach { it.run() }
        relaxed.slabBytes() shouldBe 0L // 4 MiB of 64: no pressure, the retain limits apply
    }
})
