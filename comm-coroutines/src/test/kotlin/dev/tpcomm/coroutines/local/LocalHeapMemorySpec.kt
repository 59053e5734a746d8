package dev.tpcomm.coroutines.local

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.spi.CollectiveValidator
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.MemorySegment
import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * Issue 19, item 5: a test on the in-process backend fails where production would. A tensor over a
 * Java heap array is refused by default, with the message MPI gives; an explicit option relaxes it.
 */
class LocalHeapMemorySpec : FunSpec({
    fun heapTensor(rank: Int) = Tensor.wrap(MemorySegment.ofArray(floatArrayOf(rank + 1f, 2f)), DType.Float32, 2)

    /** What a user gets from NDArray.toByteBuffer() and friends: a heap ByteBuffer, wrapped. */
    fun heapBufferTensor(rank: Int): Tensor {
        val bb = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder())
        bb.putFloat(rank + 1f).putFloat(2f).flip()
        return Tensor.wrap(MemorySegment.ofBuffer(bb), DType.Float32, 2)
    }

    /** The message MPI gives for the same mistake (MPI's validator hands host addresses to native code). */
    fun mpiMessage(tensor: Tensor): String? {
        val mpi = CollectiveValidator(2, Device.Host, nativeMemory = true, maxCount = Int.MAX_VALUE.toLong())
        return shouldThrow<IllegalArgumentException> { mpi.allReduce(tensor, ReduceOp.Sum) }.message
    }

    test("runLocalWorld refuses an all-reduce of a heap-array tensor with MPI's message, before any data moves") {
        val e = shouldThrow<IllegalArgumentException> {
            runLocalWorld(2) { comm -> comm.allReduce(heapTensor(comm.rank)) }
        }
        e.message shouldBe mpiMessage(heapTensor(0))
        e.message!! shouldContain "Java heap array"
    }

    test("a copy of a heap ByteBuffer (NDArray.toByteBuffer()) is refused too, on every collective that takes it") {
        shouldThrow<IllegalArgumentException> {
            runLocalWorld(2) { comm -> comm.allReduce(heapBufferTensor(comm.rank)) }
        }.message shouldBe mpiMessage(heapBufferTensor(0))
        shouldThrow<IllegalArgumentException> {
            runLocalWorld(2) { comm -> comm.allGather(heapBufferTensor(comm.rank)) }
        }.message!! shouldContain "allGather: the input is backed by a Java heap array"
        shouldThrow<IllegalArgumentException> {
            runLocalWorld(2) { comm -> if (comm.rank == 0) comm.send(heapTensor(0), 1) else comm.recv(Tensor.zeros(DType.Float32, 2), 0) }
        }.message!! shouldContain "send: the tensor is backed by a Java heap array"
    }

    test("Comm.create(\"local\") refuses it the same way") {
        val comm = Comm.create("local", CommConfig())
        try {
            shouldThrow<IllegalArgumentException> { comm.allReduce(heapTensor(0)) }.message shouldBe mpiMessage(heapTensor(0))
        } finally {
            comm.close()
        }
    }

    test("the option local.allowHeapMemory=true lets an in-process-only program reduce heap tensors") {
        LocalBackendFactory.ALLOW_HEAP_MEMORY_OPTION shouldBe "local.allowHeapMemory"
        val config = CommConfig(options = mapOf(LocalBackendFactory.ALLOW_HEAP_MEMORY_OPTION to "true"))
        val out = runLocalWorld(2, config) { comm ->
            val t = heapTensor(comm.rank)
            comm.allReduce(t)
            val b = heapBufferTensor(comm.rank)
            comm.allReduce(b)
            t.toFloatArray().toList() to b.toFloatArray().toList()
        }
        out shouldBe List(2) { listOf(3f, 4f) to listOf(3f, 4f) }
        val single = Comm.create("local", config)
        try {
            single.allReduce(heapTensor(0)).toFloatArray().toList() shouldBe listOf(1f, 2f)
        } finally {
            single.close()
        }
    }

    test("the option refuses a value that is not a boolean, saying what it accepts") {
        shouldThrow<IllegalArgumentException> {
            LocalWorld(2, CommConfig(options = mapOf("local.allowHeapMemory" to "maybe")))
        }.message shouldBe "option local.allowHeapMemory=\"maybe\" is not a boolean; use true or false"
    }
})
