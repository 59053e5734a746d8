package dev.tpcomm.coroutines.local

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.LinkedBlockingQueue

/**
 * Compiles the in-process backend's vector kernels off the callers' threads. Until C2 has compiled
 * a kernel, the Vector API runs in the interpreter and in C1 code, which box every vector: a fresh
 * JVM's first 1 MiB all-reduces at 4 ranks took 130-1,400 ms each that way, where the scalar kernels
 * take 1-9 ms from their first call (docs/BENCHMARKS.md, "What the first 20,000 calls pay for").
 * So the first call of a dtype and op asks for its kernel here and is reduced by the scalar kernel
 * (the same bits); one daemon thread, `tpcomm-kernel-warmup`, runs the kernel on synthetic data of
 * every width and output count its branches have until a call is as fast as compiled code, then
 * marks it [isWarm], and later calls use it.
 *
 * Thread-safe; the thread starts at the first request and ends when the queue has been idle for a
 * while (a later request starts it again). A kernel that does not get fast within [BUDGET_NANOS] is
 * marked warm anyway (the vector kernel then warms on the callers, as before).
 */
internal object VectorWarmup {
    private const val COLD = 0
    private const val WARMING = 1
    private const val WARM = 2

    /** The longest a kernel is warmed before it is used anyway. */
    private const val BUDGET_NANOS: Long = 5_000_000_000L

    /** Elements per warm-up call: several vector iterations and a scalar tail. */
    private const val COUNT: Long = 1027

    /** Widths and output counts that take every branch of the kernels' loops (see [VectorKernels]). */
    private val SHAPES: List<Pair<Int, Int>> = listOf(4 to 4, 2 to 2, 4 to 1, 2 to 1, 3 to 1, 3 to 3, 1 to 1, 5 to 1, 5 to 5, 8 to 8)

    private val states = ConcurrentHashMap<Pair<DType, ReduceOp>, Int>()
    private val queue = LinkedBlockingQueue<Pair<DType, ReduceOp>>()
    private val lock = Any()
    @Volatile private var worker: Thread? = null

    /** The thread that warmed the last kernel (for tests). */
    @Volatile var warmedBy: String? = null
        private set

    /** Whether [dtype]'s vector kernel of [op] is compiled (or its warm-up gave up); if not, asks for it. */
    fun isWarm(dtype: DType, op: ReduceOp): Boolean {
        val key = dtype to op
        val state = states[key]
        if (state == WARM) return true
        if (state == null && states.putIfAbsent(key, WARMING) == null) {
            queue.add(key)
            ensureWorker()
        }
        return false
    }

    /** Blocks until every kernel asked for so far is warm, for at most [timeoutMillis]; for tests and benchmarks. */
    fun awaitIdle(timeoutMillis: Long): Boolean {
        val end = System.nanoTime() + timeoutMillis * 1_000_000
        while (states.values.any { it != WARM }) {
            if (System.nanoTime() > end) return false
            Thread.sleep(5)
        }
        return true
    }

    private fun ensureWorker() = synchronized(lock) {
        if (worker?.isAlive == true) return
        worker = Thread(::drain, "tpcomm-kernel-warmup").apply { isDaemon = true; priority = Thread.MIN_PRIORITY; start() }
    }

    private fun drain() {
        while (true) {
            val key = queue.poll(2, java.util.concurrent.TimeUnit.SECONDS) ?: synchronized(lock) {
                // Idle: end, unless a request came in meanwhile (it found this thread alive).
                if (queue.isEmpty()) { worker = null; return }
                null
            } ?: continue
            try {
                warm(key.first, key.second)
                warmedBy = Thread.currentThread().name
            } catch (t: Throwable) {
                // The callers' own calls will show any real problem; the kernel is used as before.
            } finally {
                states[key] = WARM
            }
        }
    }

    private fun warm(dtype: DType, op: ReduceOp) {
        val bytes = COUNT * dtype.byteSize
        Arena.ofConfined().use { arena ->
            val maxW = SHAPES.maxOf { it.first }
            val ins = Array<MemorySegment?>(maxW) { arena.allocate(bytes, 64) }
            val outs = Array<MemorySegment?>(maxW) { arena.allocate(bytes, 64) }
            // Zeros (as allocated): finite under every op, whatever the dtype.
            val start = System.nanoTime()
            var fastRounds = 0
            while (System.nanoTime() - start < BUDGET_NANOS) {
                val t0 = System.nanoTime()
                for ((w, nOuts) in SHAPES) repeat(20) { ReduceKernels.vectorReduce(dtype, op, w, ins, 0, outs, nOuts, 0, COUNT) }
                val perElement = (System.nanoTime() - t0).toDouble() / (SHAPES.size * 20 * COUNT)
                // Compiled vector code reduces an element in well under a nanosecond; boxed C1 code in tens.
                fastRounds = if (perElement < FAST_NANOS_PER_ELEMENT) fastRounds + 1 else 0
                if (fastRounds >= 20) return
            }
        }
    }

    private const val FAST_NANOS_PER_ELEMENT = 2.0
}
