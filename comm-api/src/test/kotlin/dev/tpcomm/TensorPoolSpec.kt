package dev.tpcomm

import dev.tpcomm.memory.HostMemoryPool
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.lang.ref.WeakReference
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit

/** Tensors on tpcomm's pooled allocator keep the lifetime guarantees of Tensor's KDoc. */
class TensorPoolSpec : FunSpec({
    // A size class no other test uses (3.25 MiB rounds to the 3.5 MiB class), so counts are exact.
    val elements = (13 shl 18) / 4
    val cls = HostMemoryPool.DEFAULT.sizeClassOf(elements * 4L)

    fun collectGarbage(until: () -> Boolean) {
        val deadline = System.nanoTime() + 20_000_000_000L
        while (!until() && System.nanoTime() < deadline) {
            System.gc()
            Thread.sleep(20)
        }
    }

    test("close gives the block back, the next tensor of that size reuses it, zeroed") {
        val before = cls.blocksInUse()
        val t = Tensor.zeros(DType.Float32, elements)
        val address = t.address
        t.fill(3.0)
        cls.blocksInUse() shouldBe before + 1
        t.close()
        cls.blocksInUse() shouldBe before
        val u = Tensor.zeros(DType.Float32, elements)
        u.address shouldBe address
        u.getFloat(0) shouldBe 0f
        u.getFloat(elements - 1L) shouldBe 0f
        u.close()
        shouldThrow<IllegalStateException> { t.segment }.message shouldBe "tensor was closed; it can no longer be read or written"
        shouldThrow<IllegalStateException> { t.getFloat(0) }
    }

    test("a block retained by an operation is not reused after close until the release") {
        val before = cls.blocksInUse()
        val t = Tensor.zeros(DType.Float32, elements)
        t.retain("allReduce")
        t.close()
        val others = List(3) { Tensor.zeros(DType.Float32, elements) }
        others.none { it.address == t.address } shouldBe true
        t.segment.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, 0, 1f) // still writable by the operation
        cls.blocksInUse() shouldBe before + 4
        t.release()
        cls.blocksInUse() shouldBe before + 3
        others.forEach { it.close() }
    }

    test("a view keeps its parent's block alive after the parent is unreachable; dropping both gives it back") {
        val before = cls.blocksInUse()
        var parent: Tensor? = Tensor.zeros(DType.Float32, elements)
        val weakParent = WeakReference(parent)
        var view: Tensor? = parent!!.chunk(2)[1]
        view!!.fill(5.0)
        parent = null
        repeat(3) { System.gc(); Thread.sleep(20) }
        (weakParent.get() != null) shouldBe true
        cls.blocksInUse() shouldBe before + 1
        val others = List(2) { Tensor.zeros(DType.Float32, elements) }
        others.none { it.address == weakParent.get()!!.address } shouldBe true
        view.getFloat(0) shouldBe 5f
        others.forEach { it.close() }
        view = null
        collectGarbage { cls.blocksInUse() == before }
        cls.blocksInUse() shouldBe before
    }

    test("tensors the program forgets go back to the pool through the garbage collector") {
        val before = cls.blocksInUse()
        repeat(4) { Tensor.zeros(DType.Float32, elements).fill(1.0) }
        collectGarbage { cls.blocksInUse() == before }
        cls.blocksInUse() shouldBe before
    }

    test("threads allocating, closing and forgetting tensors at once never see another tensor's writes") {
        val exec = Executors.newFixedThreadPool(4)
        val futures = (0 until 4).map { id ->
            exec.submit<Unit> {
                val keep = ArrayDeque<Pair<Tensor, Long>>()
                for (i in 0 until 50_000) {
                    val tag = (id.toLong() shl 32) or i.toLong()
                    val t = Tensor.zeros(DType.Int64, 1 + i % 9)
                    t.getLong(0) shouldBe 0L
                    t.setLong(0, tag)
                    t.setLong(t.numel - 1, tag)
                    if (i % 3 == 0) continue // forgotten: the Cleaner gives it back
                    keep.addLast(t to tag)
                    if (keep.size > 8) {
                        val (old, oldTag) = keep.removeFirst()
                        old.getLong(0) shouldBe oldTag
                        old.getLong(old.numel - 1) shouldBe oldTag
                        old.close()
                    }
                }
                keep.forEach { it.first.close() }
            }
        }
        futures.forEach { it.get(120, TimeUnit.SECONDS) }
        exec.shutdown()
    }

    test("copy and of fill every byte of a reused block") {
        val t = Tensor.of(longArrayOf(-1, -1, -1))
        t.close()
        Tensor.of(longArrayOf(1, 2, 3)).toLongArray() shouldBe longArrayOf(1, 2, 3)
        val src = Tensor.of(doubleArrayOf(1.5, 2.5))
        src.copy().toDoubleArray() shouldBe doubleArrayOf(1.5, 2.5)
        Tensor.fromDoubles(DType.Int8, doubleArrayOf(1.0, 2.0, 3.0)).toIntArray() shouldBe intArrayOf(1, 2, 3)
    }
})
