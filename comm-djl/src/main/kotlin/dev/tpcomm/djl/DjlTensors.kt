@file:JvmName("DjlTensors")

package dev.tpcomm.djl

import ai.djl.ndarray.NDArray
import ai.djl.ndarray.NDManager
import ai.djl.ndarray.types.Shape
import ai.djl.ndarray.types.SparseFormat
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.nio.ByteBuffer
import java.nio.ByteOrder

/*
 * What DJL 0.36's PyTorch engine (CPU) shares and what it copies, as DjlMemorySharingTest
 * establishes:
 *   NDArray.toByteBuffer()              copies (a heap buffer)
 *   NDArray.toByteBuffer(true)          shares when the array is dense and contiguous on the CPU
 *                                       (a direct buffer over the tensor's data_ptr); otherwise a
 *                                       direct buffer over a contiguous copy kept by the array's manager
 *   NDManager.create(direct ByteBuffer) shares on a CPU manager (torch::from_blob), copies on a GPU
 *   NDManager.create(heap buffer/array) copies
 *   NDArray.set(direct ByteBuffer)      shares: the array's storage is re-pointed at the buffer
 *   NDArray.set(heap buffer/array)      copies into a new direct buffer, then re-points as above
 */

/**
 * A tpcomm [Tensor] viewing this array's memory: no copy, and what a collective writes into the
 * tensor (an all-reduce in place, a broadcast) is what the array holds. From Java:
 * `DjlTensors.asTensor(array)`.
 *
 * DJL allows this for a dense array on the CPU whose elements are contiguous in memory, which
 * every freshly computed PyTorch array is; a transposed or otherwise strided view is not (DJL
 * would hand out a contiguous copy instead, and writes through it would be lost), so it is refused
 * rather than silently copied: use [toTensor] to copy. An empty array gives a new empty tensor.
 *
 * **Lifetime.** The tensor does not own the memory and cannot keep it alive: it is valid only as
 * long as the array is open (not closed, nor its manager). Do not close the array while a
 * collective on the tensor is in flight.
 *
 * Thread-safety: as the array's; the memory is shared, so writes race as in C.
 *
 * @throws IllegalArgumentException if the array's [ai.djl.ndarray.types.DataType] has no tpcomm
 * [dev.tpcomm.DType] (see [toDType]), it lives on a GPU, it is sparse, a dimension exceeds
 * [Int.MAX_VALUE], its engine gives no direct view of its memory, or it is not contiguous; the
 * message says what to do instead.
 */
public fun NDArray.asTensor(): Tensor {
    val dtype = dataType.toDType()
    val dims = shape.toTensorDims("asTensor")
    require(!device.isGpu) {
        "asTensor: the array is on $device, and tpcomm host tensors need CPU memory; copy it with toDevice(Device.cpu(), true) first " +
            "(or pass its device pointer to a GPU backend with Tensor.wrapDevice)"
    }
    require(sparseFormat == SparseFormat.DENSE) { "asTensor: the array is sparse ($sparseFormat); make it dense with toDense() first" }
    if (dims.any { it == 0 }) return Tensor.zeros(dtype, *dims)
    val buffer = toByteBuffer(true)
    require(buffer.isDirect) {
        "asTensor: the ${manager.engine.engineName} engine gives no direct view of this array's memory; copy it with toTensor() instead"
    }
    // For a strided array PyTorch's toByteBuffer(true) returns a fresh contiguous copy each time:
    // a second call at another address means the first was not the array's memory.
    require(MemorySegment.ofBuffer(toByteBuffer(true)).address() == MemorySegment.ofBuffer(buffer).address()) {
        "asTensor: the array is not contiguous in memory (a transposed or strided view of $shape), so DJL can only hand out a copy, " +
            "which writes would not reach; copy it with toTensor() instead"
    }
    return Tensor.wrap(buffer.order(ByteOrder.nativeOrder()), dtype, *dims)
}

/**
 * A new tpcomm [Tensor] holding a copy of this array's elements, with its own memory and lifetime
 * (pooled, like [Tensor.zeros]). Works for every array [asTensor] accepts and for strided arrays
 * and arrays on a GPU (DJL copies them to the host). From Java: `DjlTensors.toTensor(array)`.
 *
 * @throws IllegalArgumentException if the array's type has no tpcomm dtype (see [toDType]), it is
 * sparse, or a dimension exceeds [Int.MAX_VALUE].
 */
public fun NDArray.toTensor(): Tensor {
    val dtype = dataType.toDType()
    val dims = shape.toTensorDims("toTensor")
    require(sparseFormat == SparseFormat.DENSE) { "toTensor: the array is sparse ($sparseFormat); make it dense with toDense() first" }
    val out = Tensor.zeros(dtype, *dims)
    if (out.byteSize == 0L) return out
    // toByteBuffer(false): one copy into a heap buffer, and no temporary array left in the manager.
    val src = toByteBuffer(false)
    check(src.remaining().toLong() == out.byteSize) { "toTensor: DJL returned ${src.remaining()} bytes for $dataType$shape, expected ${out.byteSize}" }
    MemorySegment.copy(MemorySegment.ofBuffer(src), 0, out.segment, 0, out.byteSize)
    return out
}

/**
 * An [NDArray] of [manager] viewing this host tensor's memory, without a copy: DJL's PyTorch
 * engine builds it with `torch::from_blob`, so what torch writes into the array (in-place
 * operations, `set`) is in the tensor and the other way round. From Java:
 * `DjlTensors.asNDArray(tensor, manager)`.
 *
 * **Lifetime.** The array keeps the tensor's memory alive: [Tensor.close] while the array is still
 * reachable only marks the tensor closed, and its memory is given back after the array has been
 * closed and collected by the garbage collector. Closing the array never frees the tensor.
 *
 * Only a CPU manager can share (DJL copies a host buffer to a GPU), so the call checks that the
 * array it got views the tensor and refuses a copy rather than returning one silently: use
 * [toNDArray] when a copy is what you want. An empty tensor gives a new empty array.
 *
 * Thread-safety: as the tensor's; the memory is shared.
 *
 * @throws IllegalArgumentException if the tensor is on a GPU, read-only or closed, or [manager]'s
 * engine copied the memory instead of sharing it.
 */
public fun Tensor.asNDArray(manager: NDManager): NDArray {
    require(device == Device.Host) { "asNDArray: the tensor is on $device; only host tensors can be viewed by an NDArray (copy it to the host first)" }
    require(!isClosed) { "asNDArray: the tensor was closed; pass an open tensor" }
    val dataType = dtype.toDataType()
    val shape = Shape(*LongArray(ndim) { size(it).toLong() })
    if (byteSize == 0L) return manager.create(shape, dataType)
    require(!segment.isReadOnly) { "asNDArray: the tensor is read-only, and torch could write through the array; copy it with toNDArray(manager)" }
    val array = manager.create(keepAliveBuffer(this), shape, dataType)
    val shared = !array.device.isGpu && array.toByteBuffer(true).let { it.isDirect && MemorySegment.ofBuffer(it).address() == address }
    if (!shared) {
        array.close()
        throw IllegalArgumentException(
            "asNDArray: the ${manager.engine.engineName} engine on ${manager.device} copied the tensor instead of viewing it; " +
                "use toNDArray(manager) when a copy is what you want, or a CPU manager to share memory",
        )
    }
    return array
}

/**
 * A new [NDArray] of [manager] holding a copy of this host tensor's elements, independent of the
 * tensor afterwards. From Java: `DjlTensors.toNDArray(tensor, manager)`.
 *
 * @throws IllegalArgumentException if the tensor is on a GPU or closed.
 */
public fun Tensor.toNDArray(manager: NDManager): NDArray {
    require(device == Device.Host) { "toNDArray: the tensor is on $device; copy it to the host first" }
    require(!isClosed) { "toNDArray: the tensor was closed; pass an open tensor" }
    val dataType = dtype.toDataType()
    val shape = Shape(*LongArray(ndim) { size(it).toLong() })
    if (byteSize == 0L) return manager.create(shape, dataType)
    require(byteSize <= Int.MAX_VALUE) { "toNDArray: the tensor has $byteSize bytes, more than one DJL buffer holds (${Int.MAX_VALUE}); split it" }
    val copy = ByteBuffer.allocateDirect(byteSize.toInt()).order(ByteOrder.nativeOrder())
    MemorySegment.copy(segment, 0, MemorySegment.ofBuffer(copy), 0, byteSize)
    return manager.create(copy, shape, dataType)
}

/** DJL's long dimensions as a tpcomm shape. */
internal fun Shape.toTensorDims(operation: String): IntArray {
    val dims = getShape()
    return IntArray(dims.size) { i ->
        require(dims[i] in 0..Int.MAX_VALUE) {
            "$operation: dimension $i of shape $this is ${dims[i]}, more than a tpcomm Tensor dimension holds (${Int.MAX_VALUE}); reshape the array"
        }
        dims[i].toInt()
    }
}

/**
 * A direct buffer over [tensor]'s memory that keeps the tensor alive and its memory allocated while
 * the buffer is reachable (DJL's array holds the buffer it was created from): the segment is
 * reinterpreted into an automatic arena whose cleanup, run once the buffer is collected, captures
 * the tensor and ends its retain.
 */
internal fun keepAliveBuffer(tensor: Tensor): ByteBuffer {
    tensor.retain("asNDArray")
    val segment = try {
        tensor.segment.reinterpret(Arena.ofAuto()) { tensor.release() }
    } catch (e: Throwable) {
        tensor.release()
        throw e
    }
    return segment.asByteBuffer().order(ByteOrder.nativeOrder())
}
