package dev.tpcomm.spi

import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldNotThrowAny
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.MemorySegment

class CollectiveValidatorSpec : FunSpec({
    val native = CollectiveValidator(worldSize = 3, device = Device.Host, nativeMemory = true, maxTag = 1000, maxCount = Int.MAX_VALUE.toLong())
    val jvm = CollectiveValidator(worldSize = 3, device = Device.Host, nativeMemory = false)

    test("a heap-backed tensor is refused where native code gets its address, accepted where the JVM moves it") {
        val heap = Tensor.wrap(MemorySegment.ofArray(FloatArray(6)), DType.Float32, 6)
        shouldThrow<IllegalArgumentException> { native.allReduce(heap, ReduceOp.Sum) }.message shouldBe
            "allReduce: the tensor is backed by a Java heap array, whose address native code cannot use; " +
            "allocate it off the heap (Tensor.zeros, Tensor.copy, or Tensor.wrap of a segment from an Arena)"
        shouldNotThrowAny { jvm.allReduce(heap, ReduceOp.Sum) }
    }

    test("a read-only tensor is refused where the call writes it, accepted where it is only read") {
        val ro = Tensor.wrap(Tensor.zeros(DType.Int32, 6).segment.asReadOnly(), DType.Int32, 6)
        for (v in listOf(native, jvm)) {
            shouldThrow<IllegalArgumentException> { v.allReduce(ro, ReduceOp.Sum) }.message shouldBe
                "allReduce: the tensor is read-only but this call writes it; pass a writable tensor (for example tensor.copy()). " +
                "(If it is a chunk along a dimension other than 0: such chunks are read-only copies, since Tensor has no strides, " +
                "so writing one could not change the chunked tensor; reduce a tensor of its own and copy the result back.)"
            shouldNotThrowAny { v.send(ro, 1, 0) }
        }
    }

    test("a view of a closed parent is refused") {
        val parent = Tensor.zeros(DType.Float32, 6)
        val view = parent.chunk(3)[1]
        parent.close()
        shouldThrow<IllegalArgumentException> { native.broadcast(view, 0) }.message shouldBe
            "broadcast: the tensor was closed; pass an open tensor"
    }

    test("an all-gather whose output size overflows an Int is refused before any data moves") {
        // Int8[1431655766] on 3 ranks: 4,294,967,298 elements, which wrapped to 2 as an Int.
        val input = Tensor.wrapDevice(Device.Cuda(0), 4096, DType.Int8, 1431655766)
        val gpu = CollectiveValidator(3, Device.Cuda(0), nativeMemory = true)
        shouldThrow<IllegalArgumentException> { gpu.allGatherShape(input, 0) }.message shouldContain
            "dim 0 would have 1431655766 x 3 = 4294967298 elements"
        shouldThrow<IllegalArgumentException> { CollectiveShapes.allGather(input, 3, 0) }
        shouldThrow<IllegalArgumentException> { gpu.gather(input, 0, 0) }
    }

    test("more elements than the library counts are refused with the limit") {
        val big = Tensor.wrapDevice(Device.Cuda(0), 4096, DType.Int8, Int.MAX_VALUE, 2)
        val v = CollectiveValidator(2, Device.Cuda(0), nativeMemory = true, maxCount = Int.MAX_VALUE.toLong())
        shouldThrow<IllegalArgumentException> { v.allReduce(big, ReduceOp.Sum) }.message shouldContain "split it into chunks"
    }

    test("tags above the library's upper bound are refused") {
        val t = Tensor.zeros(DType.Float32, 2)
        shouldThrow<IllegalArgumentException> { native.send(t, 1, 1001) }.message shouldBe
            "send: tag 1001 is above the largest tag this backend's library accepts (1000, its MPI_TAG_UB); pass a tag in 0..1000"
        shouldNotThrowAny { native.recv(t, 1, 1000) }
    }

    test("scatter: a root without input is told the shape to pass; other ranks may pass null") {
        val out = Tensor.zeros(DType.Float32, 2, 4)
        shouldThrow<IllegalArgumentException> { native.scatter(out, null, root = 1, rank = 1, dim = -1) }.message shouldBe
            "scatter: rank 1 is the root and must pass an input of shape [2, 12] (the outputs of all ranks joined along dim 1); got null"
        native.scatter(out, null, root = 1, rank = 0, dim = -1) shouldBe 1
    }

    test("gather with a bad dim names gather, not allGather") {
        val t = Tensor.zeros(DType.Float32, 3)
        shouldThrow<IllegalArgumentException> { native.gather(t, 0, 2) }.message shouldBe
            "gather: dim 2 is out of range for shape [3]; pass a dim in -1..0"
    }

    test("an out-of-place call whose output overlaps its input is refused") {
        val buf = Tensor.zeros(DType.Float32, 9)
        val input = buf.chunk(3)[0]
        shouldThrow<IllegalArgumentException> { native.allGatherInto(buf, input, 0) }.message shouldContain "share memory"
        shouldNotThrowAny { native.allGatherInto(Tensor.zeros(DType.Float32, 9), input, 0) }
    }

    test("uneven collectives: sizes are one per rank, not negative, add up, and match this rank's input") {
        val two = Tensor.zeros(DType.Float32, 2, 4)
        native.allGatherVShape(two, listOf(1, 2, 0), rank = 1) shouldBe listOf(3, 4)
        shouldThrow<IllegalArgumentException> { native.allGatherVShape(two, listOf(1, 2), rank = 1) }.message shouldBe
            "allGatherV: sizes has 2 entries but the world has 3 ranks; pass one row count per rank"
        shouldThrow<IllegalArgumentException> { native.allGatherVShape(two, listOf(1, 2, -1), rank = 1) }.message shouldBe
            "allGatherV: sizes[2] is -1; row counts must be >= 0"
        shouldThrow<IllegalArgumentException> { native.allGatherVShape(two, listOf(1, 3, 0), rank = 1) }.message shouldContain
            "sizes[1] is 3 but this rank's input has 2 rows"
        native.reduceScatterVShape(two, listOf(0, 2, 0), ReduceOp.Sum, rank = 1) shouldBe listOf(2, 4)
        shouldThrow<IllegalArgumentException> { native.reduceScatterVShape(two, listOf(1, 2, 0), ReduceOp.Sum, rank = 1) }.message shouldContain
            "the sizes add up to 3 rows but the input has 2"
        native.allToAllVShape(two, listOf(1, 1, 0), listOf(0, 0, 5)) shouldBe listOf(5, 4)
        shouldThrow<IllegalArgumentException> { native.allToAllVShape(two, listOf(2, 1, 0), listOf(0, 0, 5)) }.message shouldContain
            "inputSplits add up to 3 rows but the input has 2"
    }

    test("uneven collectives: 64-bit totals are refused with what to change, never wrapped") {
        val one = Tensor.zeros(DType.Float32, 1, 4)
        // Rows beyond a dimension (an Int): the sizes' sum is computed in Long.
        shouldThrow<IllegalArgumentException> { jvm.allGatherVShape(one, listOf(1, Int.MAX_VALUE, 5), rank = 0) }.message shouldBe
            "allGatherV: the sizes add up to ${Int.MAX_VALUE + 6L} rows, more than a dimension holds (${Int.MAX_VALUE}); split the exchange into several calls"
        shouldThrow<IllegalArgumentException> { jvm.allToAllVShape(one, listOf(1, 0, 0), listOf(Int.MAX_VALUE, Int.MAX_VALUE, 0)) }.message shouldContain
            "more than a dimension holds"
        // Elements beyond MPI's int counts (maxCount = Int.MAX_VALUE): rows fit, rows x 4 elements do not.
        val rows = Int.MAX_VALUE / 4 + 1
        shouldThrow<IllegalArgumentException> { native.allToAllVShape(one, listOf(1, 0, 0), listOf(rows, 0, 0)) }.message shouldBe
            "allToAllV: the result would have $rows rows of 4 elements, more than this backend moves in one call (${Int.MAX_VALUE}); split the exchange into several calls"
        shouldNotThrowAny { jvm.allToAllVShape(one, listOf(1, 0, 0), listOf(rows, 0, 0)) }
    }

    test("anyDevice: host tensors get every host check, device tensors on any GPU every other check, with the same messages") {
        val mpi = CollectiveValidator(2, Device.Host, nativeMemory = true, maxTag = 1000, anyDevice = true)
        val host = Tensor.zeros(DType.Float32, 4)
        val cuda = Tensor.wrapDevice(Device.Cuda(1), 4096, DType.Float32, 4)
        val rocm = Tensor.wrapDevice(Device.Rocm(0), 8192, DType.Float32, 8)
        shouldNotThrowAny { mpi.allReduce(cuda, ReduceOp.Sum); mpi.allGatherInto(rocm, cuda, 0); mpi.send(host, 1, 1000) }
        val heap = Tensor.wrap(MemorySegment.ofArray(FloatArray(4)), DType.Float32, 4)
        shouldThrow<IllegalArgumentException> { mpi.allReduce(heap, ReduceOp.Sum) }.message shouldContain "backed by a Java heap array"
        for (t in listOf(host, cuda)) {
            shouldThrow<IllegalArgumentException> { mpi.send(t, 1, 1001) }.message shouldBe
                "send: tag 1001 is above the largest tag this backend's library accepts (1000, its MPI_TAG_UB); pass a tag in 0..1000"
            shouldThrow<IllegalArgumentException> { mpi.reduce(t, 2, ReduceOp.Sum) }.message shouldBe
                "reduce: root 2 is out of range; pass a rank in 0 until 2"
        }
        // Device tensors on one device overlap by address; the input inside the output is refused.
        val out = Tensor.wrapDevice(Device.Cuda(1), 4096, DType.Float32, 8)
        shouldThrow<IllegalArgumentException> { mpi.allGatherInto(out, cuda, 0) }.message shouldContain "share memory"
        val closed = Tensor.wrapDevice(Device.Cuda(0), 4096, DType.Float32, 4).also { it.close() }
        shouldThrow<IllegalArgumentException> { mpi.allReduce(closed, ReduceOp.Sum) }.message shouldBe "allReduce: the tensor was closed; pass an open tensor"
        // Without anyDevice a host communicator still refuses device tensors.
        shouldThrow<IllegalArgumentException> { native.allReduce(Tensor.wrapDevice(Device.Cuda(0), 4096, DType.Float32, 3), ReduceOp.Sum) }.message shouldBe
            "allReduce: the tensor is on Cuda(index=0) but this communicator moves tensors on Host"
    }

    test("dtypeRefusal: a dtype the backend's library lacks is refused in every role, with the backend's words") {
        val v = CollectiveValidator(2, Device.Cuda(0), nativeMemory = false, dtypeRefusal = { if (it == DType.BFloat16) "NCCL 2.9.9 has no bfloat16" else null })
        val bf = Tensor.wrapDevice(Device.Cuda(0), 4096, DType.BFloat16, 4)
        shouldThrow<IllegalArgumentException> { v.broadcast(bf, 0) }.message shouldBe "broadcast: NCCL 2.9.9 has no bfloat16"
        shouldThrow<IllegalArgumentException> { v.recv(bf, 1, 0) }.message shouldBe "recv: NCCL 2.9.9 has no bfloat16"
        shouldNotThrowAny { v.broadcast(Tensor.wrapDevice(Device.Cuda(0), 4096, DType.Float16, 4), 0) }
    }

    test("reductionRefusal: an op the library cannot reduce is refused by every reducing operation, after the core's op check, with the backend's words") {
        val v = CollectiveValidator(2, Device.Cuda(0), nativeMemory = false, reductionRefusal = { op, dtype ->
            if (op == ReduceOp.BitwiseAnd || dtype == DType.Int16) "lib cannot reduce $op on $dtype" else null
        })
        fun t(dtype: DType, vararg shape: Int) = Tensor.wrapDevice(Device.Cuda(0), 4096, dtype, *shape)
        fun out(dtype: DType, vararg shape: Int) = Tensor.wrapDevice(Device.Cuda(0), 1 shl 20, dtype, *shape)
        val ints = t(DType.Int32, 4)
        val and = ReduceOp.BitwiseAnd
        shouldThrow<IllegalArgumentException> { v.allReduce(ints, and) }.message shouldBe "allReduce: lib cannot reduce BitwiseAnd on Int32"
        shouldThrow<IllegalArgumentException> { v.reduce(ints, 1, and) }.message shouldBe "reduce: lib cannot reduce BitwiseAnd on Int32"
        shouldThrow<IllegalArgumentException> { v.reduceScatterShape(ints, and, 0) }.message shouldBe "reduceScatter: lib cannot reduce BitwiseAnd on Int32"
        shouldThrow<IllegalArgumentException> { v.reduceScatterInto(out(DType.Int32, 2), ints, and, 0) }.message shouldBe "reduceScatter: lib cannot reduce BitwiseAnd on Int32"
        shouldThrow<IllegalArgumentException> { v.reduceScatterVShape(t(DType.Int16, 4), listOf(2, 2), ReduceOp.Sum, 0) }.message shouldBe
            "reduceScatterV: lib cannot reduce Sum on Int16"
        shouldThrow<IllegalArgumentException> { v.reduceScatterVInto(out(DType.Int32, 2), ints, listOf(2, 2), and, 0) }.message shouldBe
            "reduceScatterV: lib cannot reduce BitwiseAnd on Int32"
        // The core's own refusal comes first (a bitwise op on floats), and data movement never asks.
        shouldThrow<IllegalArgumentException> { v.allReduce(t(DType.Float32, 4), and) }.message!! shouldContain "integer dtypes and Bool only"
        shouldNotThrowAny { v.broadcast(t(DType.Int16, 4), 0) }
        shouldNotThrowAny { v.allReduce(ints, ReduceOp.BitwiseOr) }
    }

    test("pointToPointLimits: tags, ANY_SOURCE and messages to oneself are refused on send, recv, every sendRecv element and the object messages") {
        val limits = PointToPointLimits(
            rank = 1, backendName = "lib", untaggedReason = "lib matches by order only",
            noAnySourceReason = "lib needs the sender's rank", noSelfMessageReason = "lib never completes it",
        )
        val v = CollectiveValidator(3, Device.Cuda(0), nativeMemory = false, pointToPointLimits = limits)
        val t = Tensor.wrapDevice(Device.Cuda(0), 4096, DType.Float32, 4)
        val u = Tensor.wrapDevice(Device.Cuda(0), 8192, DType.Float32, 4)
        val any = dev.tpcomm.Communicator.ANY_SOURCE
        val anyTag = dev.tpcomm.Communicator.ANY_TAG
        fun refused(block: () -> Unit) = shouldThrow<IllegalArgumentException>(block).message
        // Tags.
        refused { v.send(t, 2, 3) } shouldBe "send: tag 3 is not supported by lib: lib matches by order only; pass tag 0"
        refused { v.recv(t, 2, 3) } shouldBe "recv: tag 3 is not supported by lib: lib matches by order only; pass tag 0 or ANY_TAG"
        refused { v.sendObject(2, 3) } shouldBe "sendObject: tag 3 is not supported by lib: lib matches by order only; pass tag 0"
        refused { v.recvObject(2, 3) } shouldBe "recvObject: tag 3 is not supported by lib: lib matches by order only; pass tag 0"
        refused { v.sendRecv(listOf(dev.tpcomm.PointToPoint.recv(u, 2), dev.tpcomm.PointToPoint.send(t, 2, 3))) } shouldBe
            "sendRecv (element 1, a send): tag 3 is not supported by lib: lib matches by order only; pass tag 0"
        shouldNotThrowAny { v.recv(t, 2, anyTag); v.recvObject(2, anyTag); v.send(t, 2, 0); v.sendObject(2, 0) }
        // ANY_SOURCE.
        refused { v.recv(t, any, 0) } shouldBe "recv: lib cannot receive from ANY_SOURCE (lib needs the sender's rank); pass the sender's rank"
        refused { v.recvObject(any, 0) } shouldBe "recvObject: lib cannot receive from ANY_SOURCE (lib needs the sender's rank); pass the sender's rank"
        refused { v.sendRecv(listOf(dev.tpcomm.PointToPoint.recv(u, any))) } shouldBe
            "sendRecv (element 0, a receive): lib cannot receive from ANY_SOURCE (lib needs the sender's rank); pass the sender's rank"
        // Oneself.
        refused { v.send(t, 1, 0) } shouldBe "send: rank 1 cannot send to itself on lib (lib never completes it); copy on the device instead"
        refused { v.recv(t, 1, 0) } shouldBe "recv: rank 1 cannot receive from itself on lib; copy on the device instead"
        refused { v.sendObject(1, 0) } shouldBe "sendObject: rank 1 cannot send to itself on lib"
        refused { v.recvObject(1, 0) } shouldBe "recvObject: rank 1 cannot receive from itself on lib"
        refused { v.sendRecv(listOf(dev.tpcomm.PointToPoint.send(t, 0), dev.tpcomm.PointToPoint.send(t, 1))) } shouldBe
            "sendRecv (element 1, a send): rank 1 cannot send to itself on lib (lib never completes it); copy on the device instead"
        // Without limits (and on a validator that declares only some), the same calls pass.
        val free = CollectiveValidator(3, Device.Cuda(0), nativeMemory = false)
        shouldNotThrowAny { free.send(t, 1, 3); free.recv(t, any, 3); free.sendObject(1, 3); free.recvObject(any, 3) }
        val tagsOnly = CollectiveValidator(3, Device.Cuda(0), nativeMemory = false, pointToPointLimits = PointToPointLimits(1, "lib", untaggedReason = "order only"))
        shouldNotThrowAny { tagsOnly.send(t, 1, 0); tagsOnly.recv(t, any, 0) }
        // The core's checks come first.
        refused { v.sendObject(3, 0) } shouldBe "sendObject: peer rank 3 is out of range; pass a rank in 0 until 3"
        refused { v.recvObject(0, -5) } shouldBe "recvObject: tag -5 is invalid; pass a tag >= 0 or Communicator.ANY_TAG"
    }

    test("a tensor over memory whose Arena was closed is refused before native code gets the freed address") {
        val arena = java.lang.foreign.Arena.ofShared()
        val t = Tensor.wrap(arena.allocate(16), DType.Float32, 4)
        arena.close()
        for (v in listOf(native, jvm)) {
            shouldThrow<IllegalArgumentException> { v.allReduce(t, ReduceOp.Sum) }.message shouldBe
                "allReduce: the tensor's memory was freed (the Arena of the segment it wraps was closed); keep the memory alive while the tensor is used"
        }
    }

    test("gatherShape checks what gather checks and returns the root's output shape") {
        val t = Tensor.zeros(DType.Float32, 2, 5)
        native.gatherShape(t, 1, -1) shouldBe listOf(2, 15)
        native.gather(t, 1, -1) shouldBe 1
        shouldThrow<IllegalArgumentException> { native.gatherShape(t, 3, 0) }.message shouldBe "gather: root 3 is out of range; pass a rank in 0 until 3"
        shouldThrow<IllegalArgumentException> { native.gatherShape(t, 0, 2) }.message shouldBe "gather: dim 2 is out of range for shape [2, 5]; pass a dim in -2..1"
    }
})
