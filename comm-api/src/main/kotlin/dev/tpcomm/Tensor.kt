package dev.tpcomm

import dev.tpcomm.memory.HostBlock
import dev.tpcomm.memory.HostMemoryPool
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.ref.Cleaner
import java.nio.ByteBuffer
import java.util.concurrent.atomic.AtomicBoolean

/**
 * A dense, contiguous, row-major tensor: the unit every collective moves.
 *
 * **Memory.** A host tensor's elements live off the JVM heap in [segment], which native code reads
 * and writes without a copy. Factories ([zeros], [of], [copy], [concat]) allocate 64-byte-aligned
 * memory. Without an arena argument the tensor owns a block of tpcomm's pooled allocator (size
 * classes carved from slabs of long-lived arenas, tensors over 4 MiB an arena of their own): [close]
 * gives the block back at once and cheaply (a fraction of a microsecond for small tensors), and
 * otherwise the garbage collector gives it back after the tensor becomes unreachable, so a loop
 * may allocate millions of tensors without closing them. The pool keeps at most 64 MiB of free
 * slabs (`-Dtpcomm.memory.retainBytes`), returns the rest and slabs idle for 5 s to the system, and
 * holds at most its budget (`-Dtpcomm.memory.budget`, `TPCOMM_MEMORY_BUDGET`; see docs/memory.md):
 * reaching it runs the garbage collector to reclaim forgotten tensors, and an allocation that still
 * does not fit throws [NativeMemoryBudgetException].
 * Keep the tensor (not only its segment) reachable while you use the segment, and do not use a
 * segment after its tensor is closed: the tensor's own accessors refuse it, but a raw segment
 * cannot tell, and its block may already hold another tensor. (`-Dtpcomm.memory.pool=false`
 * gives each tensor its own arena again, slower, so that such a stale segment fails with
 * [IllegalStateException]: a debugging aid.) Given an arena, the memory belongs to that arena and
 * [close] only marks the tensor closed. [wrap] and [wrapDevice] never own memory; device outputs a
 * backend allocated (`allGather`'s, ...) are freed by [close], ordered after the work queued on them. Views made by
 * [chunk] along dimension 0, [view], [narrow] and [split] share their parent's memory and keep it
 * alive: the block is reused only after the parent is closed (or unreachable, with all its views)
 * and no operation that retained it is in flight.
 *
 * **Devices.** A device tensor ([Device.isGpu]) is a typed view of a device pointer ([address]);
 * it has no host segment and the element accessors throw [IllegalStateException].
 *
 * **Thread-safety.** A tensor is a view of memory with no locking: concurrent writes to the same
 * elements race as they would in C. Metadata ([dtype], [shape], [device]) is immutable.
 * Element access ([getDouble], [setDouble], ...) is meant for tests and small data; bulk work
 * goes through [segment].
 */
public class Tensor private constructor(
    /** Element type. */
    public val dtype: DType,
    shape: IntArray,
    /** Where the elements live. */
    public val device: Device,
    private val hostSegment: MemorySegment?,
    private val deviceAddress: Long,
    /** What gives the owned memory back (a [HostBlock], or a device output's free), run once by [close] or the Cleaner. */
    private val ownedMemory: Runnable?,
    private val parent: Tensor?,
) : AutoCloseable {
    internal val dims: IntArray = shape.copyOf()
    private val closed = AtomicBoolean(false)
    private val freed = AtomicBoolean(false)

    /** Operations in flight on this tensor's memory (counted on the tensor that owns it, the root of its views). */
    private val inFlight = java.util.concurrent.atomic.AtomicInteger(0)
    // The block (not this tensor) is the cleaning action: it never references the tensor.
    private val cleanable: Cleaner.Cleanable? = ownedMemory?.let { CLEANER.register(this, it) }

    /** Sizes of the dimensions, outermost first; empty for a scalar. */
    public val shape: List<Int> = dims.toList()

    /** Number of dimensions (0 for a scalar). */
    public val ndim: Int get() = dims.size

    /** Number of elements (1 for a scalar). */
    public val numel: Long = dims.fold(1L) { acc, d -> acc * d } // exact: every shape passed elementCount first

    /** Size of the elements in bytes. */
    public val byteSize: Long = numel * dtype.byteSize

    /** True once [close] was called on this tensor or, for a view, on the tensor it views. */
    public val isClosed: Boolean get() = closed.get() || parent?.closed?.get() == true

    /**
     * The host memory holding the elements, exactly [byteSize] bytes.
     *
     * @throws IllegalStateException for a device tensor, or after [close].
     */
    public val segment: MemorySegment
        get() {
            val s = hostSegment ?: throw IllegalStateException(
                "tensor on $device has no host segment; use its address with a GPU backend, or copy it to the host first"
            )
            check(!isClosed || (parent ?: this).inFlight.get() > 0) { "tensor was closed; it can no longer be read or written" }
            return s
        }

    /** Address of the first element: the device pointer for device tensors, the native address for host tensors. */
    public val address: Long
        get() = hostSegment?.address() ?: deviceAddress

    /** Size of dimension [dim]; negative [dim] counts from the end. */
    public fun size(dim: Int): Int = dims[normalizeDim(dim)]

    /** Number of elements in one step along [dim] (the row-major stride, in elements). */
    public fun stride(dim: Int): Long {
        val d = normalizeDim(dim)
        var s = 1L
        for (i in d + 1 until dims.size) s *= dims[i]
        return s
    }

    /**
     * Splits this tensor into [parts] equal tensors along [dim].
     *
     * Along dimension 0 (or any split where every outer dimension has size 1) the parts are views
     * sharing this tensor's memory. Along other dimensions they cannot be (Tensor has no strides):
     * the parts are **read-only copies**, so that an in-place operation on one (a collective such as
     * `allReduce`, `setDouble`, `fill`) fails loudly instead of leaving this tensor unchanged
     * without a word. Read them, or `copy()` one to get a writable copy on purpose.
     *
     * @throws IllegalArgumentException if [dim] is out of range or the size along [dim] is not
     * divisible by [parts].
     */
    public fun chunk(parts: Int, dim: Int = 0): List<Tensor> {
        require(parts >= 1) { "chunk: parts must be >= 1, got $parts" }
        val d = normalizeDim(dim)
        require(dims[d] % parts == 0) {
            "chunk: size ${dims[d]} of dimension $d is not divisible by $parts; pass a tensor whose dimension $d is a multiple of $parts"
        }
        val len = dims[d] / parts
        val outer = outerCount(d)
        val partShape = dims.copyOf().also { it[d] = len }
        return if (outer == 1L) {
            val partBytes = byteSize / parts
            List(parts) { i -> viewAt(i * partBytes, partShape) }
        } else {
            requireHost("chunk along a dimension other than 0")
            val rowBytes = stride(d) * len * dtype.byteSize
            val partBytes = byteSize / parts
            List(parts) { i ->
                val block = HostMemoryPool.DEFAULT.allocate(partBytes, false)
                val src = segment
                val dst = block.segment
                for (o in 0 until outer) {
                    MemorySegment.copy(src, (o * parts + i) * rowBytes, dst, o * rowBytes, rowBytes)
                }
                Tensor(dtype, partShape, Device.Host, dst.asReadOnly(), 0L, block, null)
            }
        }
    }

    /**
     * A view of elements `start until start + length` along [dim]: no copy, the same memory as this
     * tensor, with the lifetime rules of every view (it keeps this tensor's memory alive, it is
     * closed when this tensor is, and an operation in flight on it defers this tensor's free).
     * Works on host and device tensors; negative [dim] counts from the end.
     *
     * Tensor is dense and row-major, with no strides: the result must be contiguous, so [dim] must
     * be 0, or every dimension before [dim] must have size 1, or [length] must cover the whole
     * dimension. Otherwise the call is refused (see the message for what to do instead).
     *
     * Thread-safe as the tensor's metadata is; the view shares the memory, so writes through it
     * race with writes through this tensor as in C.
     *
     * @throws IllegalArgumentException if [dim] is out of range, the range does not fit in the
     * dimension, or the view would not be contiguous.
     * @throws IllegalStateException if this host tensor is closed.
     */
    public fun narrow(dim: Int, start: Int, length: Int): Tensor {
        val d = normalizeDim(dim)
        require(start >= 0 && length >= 0 && start.toLong() + length <= dims[d]) {
            "narrow: elements $start until ${start.toLong() + length} do not fit in dimension $d of size ${dims[d]} (shape $shape); " +
                "pass 0 <= start and start + length <= ${dims[d]}"
        }
        if (length != dims[d]) requireContiguousParts(d, "narrow")
        val newShape = dims.copyOf().also { it[d] = length }
        return viewAt(start * stride(d) * dtype.byteSize, newShape)
    }

    /**
     * Splits this tensor along [dim] into consecutive views of [sizes] elements each (PyTorch's
     * `split` with a list of sizes): no copy; each part is [narrow] of its range, with the same
     * lifetime rules and the same contiguity requirement (dimension 0, or only size-1 dimensions
     * before [dim]). A gradient bucket, for instance, is one flat buffer split into the tensors a
     * framework computes into, reduced with one collective.
     *
     * @throws IllegalArgumentException if a size is negative, the sizes do not add up to the size
     * of [dim], [dim] is out of range, or the parts would not be contiguous.
     * @throws IllegalStateException if this host tensor is closed.
     */
    @JvmOverloads
    public fun split(sizes: List<Int>, dim: Int = 0): List<Tensor> {
        val d = normalizeDim(dim)
        require(sizes.all { it >= 0 }) { "split: sizes $sizes include a negative size; every size must be >= 0" }
        val total = sizes.sumOf { it.toLong() }
        require(total == dims[d].toLong()) {
            "split: sizes $sizes add up to $total but dimension $d has size ${dims[d]} (shape $shape); pass sizes that add up to ${dims[d]}"
        }
        if (sizes.size > 1) requireContiguousParts(d, "split")
        val out = ArrayList<Tensor>(sizes.size)
        var start = 0
        for (len in sizes) {
            out += narrow(d, start, len)
            start += len
        }
        return out
    }

    /** Parts along [d] are contiguous only when every dimension before [d] has size 1. */
    private fun requireContiguousParts(d: Int, what: String) {
        if (outerCount(d) <= 1L) return
        throw IllegalArgumentException(
            "$what along dimension $d of a tensor of shape $shape would not be contiguous, and Tensor has no strides; " +
                "$what along dimension 0 (lay the tensor out with that dimension first), or copy the parts out with chunk(parts, $d)",
        )
    }

    /**
     * A view of the same memory with another shape holding the same number of elements.
     *
     * @throws IllegalArgumentException when [newShape] has a negative size, more elements than a
     * `Long` counts, or another number of elements than this tensor.
     */
    public fun view(vararg newShape: Int): Tensor {
        val n = TensorShapes.elementCount(newShape, dtype, "view")
        require(n == numel) {
            "view: shape ${newShape.toList()} holds $n elements but the tensor has $numel (shape $shape); pass a shape whose sizes multiply to $numel"
        }
        return viewAt(0, newShape)
    }

    /** A tensor of the same dtype and shape owning a copy of the elements (host tensors only). */
    public fun copy(): Tensor {
        requireHost("copy")
        val out = allocate(dtype, dims, null, zero = false)
        MemorySegment.copy(segment, 0, out.segment, 0, byteSize)
        return out
    }

    /** Copies [source]'s elements into this tensor; both must have the same dtype and number of elements. */
    public fun copyFrom(source: Tensor): Tensor {
        requireHost("copyFrom"); source.requireHost("copyFrom")
        require(source.dtype == dtype && source.numel == numel) {
            "copyFrom: source is ${source.dtype}${source.shape}, this tensor is $dtype$shape; they must match in dtype and element count"
        }
        MemorySegment.copy(source.segment, 0, segment, 0, byteSize)
        return this
    }

    /** Sets every element to [value] (converted to [dtype]). */
    public fun fill(value: Double): Tensor {
        requireHost("fill")
        for (i in 0 until numel) setDouble(i, value)
        return this
    }

    /**
     * Element [index] (flat, row-major) converted to Double; 64-bit integers beyond 2^53 lose precision
     * (use [getLong]); UInt32 and UInt64 read unsigned; [DType.Bool] reads 1.0 (any non-zero byte) or 0.0.
     */
    public fun getDouble(index: Long): Double {
        val s = segment
        checkIndex(index)
        val off = index * dtype.byteSize
        return TensorElements.getDouble(s, dtype, off)
    }

    /**
     * Stores [value] at [index], converted to [dtype]: rounded to nearest for floats (FP8 saturating
     * to its largest finite value, see [Float8]), truncated toward zero and wrapped for integers
     * (UInt64 takes values up to 2^64 - 1), and for [DType.Bool] true unless [value] is 0 (NaN is true).
     */
    public fun setDouble(index: Long, value: Double) {
        val s = segment
        checkIndex(index)
        val off = index * dtype.byteSize
        TensorElements.setDouble(s, dtype, off, value)
    }

    /**
     * Element [index] as a Long: exact for integer dtypes (UInt32 as 0..2^32-1; UInt64 as its 64 bits,
     * so values from 2^63 read negative, as `ULong.toLong()`), 0 or 1 for [DType.Bool], truncated
     * toward zero for floats.
     */
    public fun getLong(index: Long): Long {
        val s = segment
        checkIndex(index)
        val off = index * dtype.byteSize
        return TensorElements.getLong(s, dtype, off)
    }

    /** Stores [value] at [index]: exact (wrapping) for integer dtypes (UInt64 takes the 64 bits), true unless 0 for [DType.Bool], rounded for floats. */
    public fun setLong(index: Long, value: Long) {
        val s = segment
        checkIndex(index)
        val off = index * dtype.byteSize
        TensorElements.setLong(s, dtype, off, value)
    }

    /** Element [index] as a Float. */
    public fun getFloat(index: Long): Float = getDouble(index).toFloat()

    /** Stores [value] at [index], converted to [dtype]. */
    public fun setFloat(index: Long, value: Float): Unit = setDouble(index, value.toDouble())

    /** All elements converted to Float, row-major. */
    public fun toFloatArray(): FloatArray {
        if (dtype == DType.Float32) return segment.toArray(TensorElements.F32)
        return FloatArray(checkedCount()) { getFloat(it.toLong()) }
    }

    /** All elements converted to Double, row-major. */
    public fun toDoubleArray(): DoubleArray {
        if (dtype == DType.Float64) return segment.toArray(TensorElements.F64)
        return DoubleArray(checkedCount()) { getDouble(it.toLong()) }
    }

    /** All elements converted to Int (integers wrap, floats truncate toward zero), row-major. */
    public fun toIntArray(): IntArray {
        if (dtype == DType.Int32) return segment.toArray(TensorElements.I32)
        return IntArray(checkedCount()) { getLong(it.toLong()).toInt() }
    }

    /** All elements converted to Long (floats truncate toward zero), row-major. */
    public fun toLongArray(): LongArray {
        if (dtype == DType.Int64) return segment.toArray(TensorElements.I64)
        return LongArray(checkedCount()) { getLong(it.toLong()) }
    }

    /** All elements as Booleans (true for any non-zero element, whatever the dtype), row-major. */
    public fun toBooleanArray(): BooleanArray = BooleanArray(checkedCount()) { getDouble(it.toLong()) != 0.0 }

    /** True when [other] has the same dtype, shape and element bits. */
    public fun contentEquals(other: Tensor): Boolean =
        dtype == other.dtype && shape == other.shape &&
            segment.mismatch(other.segment) == -1L

    /**
     * Frees the memory this tensor owns. Idempotent. A tensor that does not own its memory
     * (wrapped, a view, or allocated from a caller's arena) is only marked closed; closing a tensor
     * also closes its views.
     *
     * **In flight.** If an operation that references this tensor or one of its views is still in
     * flight, the tensor is marked closed at once (new operations refuse it) and its memory is freed
     * when the last such operation completes, fails or is aborted: native code never writes freed
     * memory. Wrapped memory belongs to its arena, which the caller must keep open as long.
     */
    override fun close() {
        if (!closed.compareAndSet(false, true)) return
        if (parent == null && inFlight.get() == 0) freeMemory()
    }

    /**
     * Marks the start of an operation that references this tensor's memory: until the matching
     * [release], [close] of this tensor, of its views or of the tensor it views only marks them
     * closed and the memory stays allocated.
     *
     * @throws IllegalArgumentException naming [operation] if the tensor is already closed.
     */
    @InternalTpcommApi
    public fun retain(operation: String) {
        val owner = parent ?: this
        owner.inFlight.incrementAndGet()
        if (isClosed) {
            release()
            throw IllegalArgumentException("$operation: the tensor was closed; pass an open tensor")
        }
    }

    /** Ends what [retain] started; frees the memory if the tensor was closed meanwhile and nothing else is in flight. */
    @InternalTpcommApi
    public fun release() {
        val owner = parent ?: this
        val left = owner.inFlight.decrementAndGet()
        check(left >= 0) { "release() without a matching retain()" }
        if (left == 0 && owner.closed.get()) owner.freeMemory()
    }

    private fun freeMemory() {
        if (freed.compareAndSet(false, true)) cleanable?.clean()
    }

    /** True once the memory this tensor owns was given back (never for views, wrapped or arena tensors). */
    internal val isMemoryReleased: Boolean get() = freed.get()

    override fun toString(): String = "Tensor($dtype, shape=$shape, device=$device)"

    internal fun normalizeDim(dim: Int): Int {
        val d = if (dim < 0) dim + dims.size else dim
        require(d in dims.indices) {
            "dimension $dim is out of range for a tensor of shape $shape; use a value in ${-dims.size}..${dims.size - 1}"
        }
        return d
    }

    internal fun outerCount(d: Int): Long {
        var o = 1L
        for (i in 0 until d) o *= dims[i]
        return o
    }

    private fun viewAt(byteOffset: Long, newShape: IntArray): Tensor {
        val n = TensorShapes.elementCount(newShape, dtype, "view")
        val root = parent ?: this
        return if (hostSegment != null) {
            Tensor(dtype, newShape, device, segment.asSlice(byteOffset, n * dtype.byteSize), 0L, null, root)
        } else {
            Tensor(dtype, newShape, device, null, deviceAddress + byteOffset, null, root)
        }
    }

    /** True for a host tensor (it has a segment), false for a device tensor. */
    internal val isHostMemory: Boolean get() = hostSegment != null

    private fun requireHost(what: String) {
        check(hostSegment != null) { "$what needs a host tensor; this one is on $device" }
    }

    private fun checkIndex(index: Long) {
        if (index < 0 || index >= numel) throw IndexOutOfBoundsException("index $index out of range for $numel elements")
    }

    private fun checkedCount(): Int {
        check(numel <= Int.MAX_VALUE) { "tensor has $numel elements, too many for one array; read it through its segment" }
        return numel.toInt()
    }

    public companion object {
        /** Alignment in bytes of the memory the factories allocate. */
        public const val ALIGNMENT: Long = 64

        private val CLEANER: Cleaner = Cleaner.create()

        /** [zero] false: the caller overwrites every byte, so a reused block is not cleared first. */
        private fun allocate(dtype: DType, shape: IntArray, arena: Arena?, zero: Boolean = true): Tensor {
            val bytes = TensorShapes.elementCount(shape, dtype, "zeros") * dtype.byteSize
            return if (arena != null) {
                Tensor(dtype, shape, Device.Host, arena.allocate(bytes, ALIGNMENT), 0L, null, null)
            } else {
                val block = HostMemoryPool.DEFAULT.allocate(bytes, zero)
                Tensor(dtype, shape, Device.Host, block.segment, 0L, block, null)
            }
        }

        /** A new zero-filled host tensor owning its memory. */
        @JvmStatic
        public fun zeros(dtype: DType, vararg shape: Int): Tensor = allocate(dtype, shape, null)

        /** A new zero-filled host tensor allocated from [arena] (freed when the arena closes). */
        @JvmStatic
        public fun zeros(dtype: DType, shape: List<Int>, arena: Arena? = null): Tensor =
            allocate(dtype, shape.toIntArray(), arena)

        /** A new zero-filled host tensor with [like]'s dtype and shape. */
        @JvmStatic
        public fun zerosLike(like: Tensor): Tensor = allocate(like.dtype, like.dims, null)

        /** A Float32 tensor holding a copy of [values]; shape defaults to one dimension. */
        @JvmStatic
        public fun of(values: FloatArray, vararg shape: Int): Tensor =
            allocate(DType.Float32, TensorShapes.resolveShape(values.size, shape), null, zero = false).also {
                MemorySegment.copy(values, 0, it.segment, TensorElements.F32, 0, values.size)
            }

        /** A Float64 tensor holding a copy of [values]; shape defaults to one dimension. */
        @JvmStatic
        public fun of(values: DoubleArray, vararg shape: Int): Tensor =
            allocate(DType.Float64, TensorShapes.resolveShape(values.size, shape), null, zero = false).also {
                MemorySegment.copy(values, 0, it.segment, TensorElements.F64, 0, values.size)
            }

        /** An Int32 tensor holding a copy of [values]; shape defaults to one dimension. */
        @JvmStatic
        public fun of(values: IntArray, vararg shape: Int): Tensor =
            allocate(DType.Int32, TensorShapes.resolveShape(values.size, shape), null, zero = false).also {
                MemorySegment.copy(values, 0, it.segment, TensorElements.I32, 0, values.size)
            }

        /** An Int64 tensor holding a copy of [values]; shape defaults to one dimension. */
        @JvmStatic
        public fun of(values: LongArray, vararg shape: Int): Tensor =
            allocate(DType.Int64, TensorShapes.resolveShape(values.size, shape), null, zero = false).also {
                MemorySegment.copy(values, 0, it.segment, TensorElements.I64, 0, values.size)
            }

        /** An Int16 tensor holding a copy of [values]; shape defaults to one dimension. */
        @JvmStatic
        public fun of(values: ShortArray, vararg shape: Int): Tensor =
            allocate(DType.Int16, TensorShapes.resolveShape(values.size, shape), null, zero = false).also {
                MemorySegment.copy(values, 0, it.segment, TensorElements.I16, 0, values.size)
            }

        /** A [DType.Bool] tensor holding [values] (1 for true, 0 for false); shape defaults to one dimension. */
        @JvmStatic
        public fun of(values: BooleanArray, vararg shape: Int): Tensor =
            allocate(DType.Bool, TensorShapes.resolveShape(values.size, shape), null, zero = false).also { t ->
                val s = t.segment
                for (i in values.indices) s.set(ValueLayout.JAVA_BYTE, i.toLong(), if (values[i]) 1 else 0)
            }

        /**
         * A tensor of [dtype] holding [values] stored with [setLong] (exact, wrapping, for integer dtypes:
         * the way to build UInt32 and UInt64 tensors); shape defaults to one dimension.
         */
        @JvmStatic
        public fun fromLongs(dtype: DType, values: LongArray, vararg shape: Int): Tensor =
            allocate(dtype, TensorShapes.resolveShape(values.size, shape), null, zero = false).also { t ->
                for (i in values.indices) t.setLong(i.toLong(), values[i])
            }

        /** A tensor of [dtype] holding [values] converted with [setDouble]; shape defaults to one dimension. */
        @JvmStatic
        public fun fromDoubles(dtype: DType, values: DoubleArray, vararg shape: Int): Tensor =
            allocate(dtype, TensorShapes.resolveShape(values.size, shape), null, zero = false).also { t ->
                for (i in values.indices) t.setDouble(i.toLong(), values[i])
            }

        /**
         * A host tensor viewing [segment] without copying and without owning it. The segment must hold
         * exactly the shape's bytes; it stays valid only as long as its own arena.
         */
        @JvmStatic
        public fun wrap(segment: MemorySegment, dtype: DType, vararg shape: Int): Tensor {
            val bytes = TensorShapes.elementCount(shape, dtype, "wrap") * dtype.byteSize
            require(segment.byteSize() == bytes) {
                "wrap: segment has ${segment.byteSize()} bytes but $dtype${shape.toList()} needs $bytes; slice the segment to size"
            }
            return Tensor(dtype, shape, Device.Host, segment, 0L, null, null)
        }

        /**
         * A host tensor viewing the bytes between [buffer]'s position and limit, without a copy and
         * without owning them: the tensor keeps [buffer] reachable (its memory is not freed while
         * the tensor or a view of it is reachable), and [close] only marks the tensor closed.
         * Elements are read and written in the platform's native byte order, whatever
         * [ByteBuffer.order] says. A read-only buffer gives a read-only tensor (collectives that
         * write it refuse it). Changing the buffer's position or limit later does not move the
         * tensor. Thread-safety: as [wrap] of a segment; the memory is shared with the buffer.
         *
         * @throws IllegalArgumentException if [buffer] is not direct (a heap buffer lives on the
         * JVM heap, which native code cannot use: allocate it with [ByteBuffer.allocateDirect], or
         * copy its contents into [zeros]), or its remaining bytes are not exactly the shape's.
         */
        @JvmStatic
        public fun wrap(buffer: ByteBuffer, dtype: DType, vararg shape: Int): Tensor {
            require(buffer.isDirect) {
                "wrap: the ByteBuffer is a heap buffer, which native code cannot use; allocate it with ByteBuffer.allocateDirect, " +
                    "or copy its contents into Tensor.zeros(...)"
            }
            val bytes = TensorShapes.elementCount(shape, dtype, "wrap") * dtype.byteSize
            require(buffer.remaining().toLong() == bytes) {
                "wrap: the ByteBuffer has ${buffer.remaining()} bytes between its position and limit but $dtype${shape.toList()} needs $bytes; " +
                    "set its position and limit to the tensor's bytes (or slice it)"
            }
            // ofBuffer's segment keeps the buffer reachable, and the tensor (and each view) keeps the segment.
            return Tensor(dtype, shape, Device.Host, MemorySegment.ofBuffer(buffer), 0L, null, null)
        }

        /** A device tensor viewing the device pointer [address] (not owned). [device] must be a GPU. */
        @JvmStatic
        public fun wrapDevice(device: Device, address: Long, dtype: DType, vararg shape: Int): Tensor {
            require(device.isGpu) { "wrapDevice needs a GPU device (Device.Cuda or Device.Rocm); for host memory use wrap" }
            require(address != 0L) { "wrapDevice: device address is null" }
            TensorShapes.elementCount(shape, dtype, "wrapDevice")
            return Tensor(dtype, shape, device, null, address, null, null)
        }

        /**
         * A device tensor viewing [address] that **owns** it: [release] gives the memory back, run
         * exactly once, by the first [close] (after the operations in flight on the tensor, as for host
         * tensors) or, if the tensor becomes unreachable unclosed, by the Cleaner. [release] must not
         * reference the tensor. For backends that allocate device outputs.
         */
        @InternalTpcommApi
        @JvmStatic
        public fun wrapDeviceOwned(device: Device, address: Long, dtype: DType, shape: IntArray, release: Runnable): Tensor {
            require(device.isGpu) { "wrapDeviceOwned needs a GPU device (Device.Cuda or Device.Rocm)" }
            require(address != 0L) { "wrapDeviceOwned: device address is null" }
            TensorShapes.elementCount(shape, dtype, "wrapDeviceOwned")
            return Tensor(dtype, shape, device, null, address, release, null)
        }

        /**
         * A new host tensor holding [tensors] joined along [dim]. All must share dtype and every
         * size but the one along [dim].
         */
        @JvmStatic
        @JvmOverloads
        public fun concat(tensors: List<Tensor>, dim: Int = 0): Tensor {
            require(tensors.isNotEmpty()) { "concat needs at least one tensor" }
            val first = tensors[0]
            val d = first.normalizeDim(dim)
            val total = TensorConcat.checkConcat(tensors, d)
            val outShape = first.dims.copyOf().also { it[d] = total }
            return concatInto(tensors, zeros(first.dtype, *outShape), dim)
        }

        /**
         * Writes [tensors] joined along [dim] into [out], which must have the joined shape.
         * Returns [out]. Allocates nothing.
         */
        @JvmStatic
        public fun concatInto(tensors: List<Tensor>, out: Tensor, dim: Int = 0): Tensor {
            require(tensors.isNotEmpty()) { "concat needs at least one tensor" }
            val first = tensors[0]
            val d = first.normalizeDim(dim)
            val total = TensorConcat.checkConcat(tensors, d)
            val expected = first.dims.copyOf().also { it[d] = total }.toList()
            require(out.dtype == first.dtype && out.shape == expected) {
                "concatInto: output is ${out.dtype}${out.shape} but the joined tensors make ${first.dtype}$expected"
            }
            TensorConcat.copyJoined(tensors, out, d, total)
            return out
        }
    }
}
