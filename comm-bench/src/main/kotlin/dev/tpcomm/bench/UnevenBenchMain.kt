package dev.tpcomm.bench

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import java.lang.foreign.MemorySegment
import java.util.Locale
import kotlin.coroutines.EmptyCoroutineContext

/**
 * allToAllV against its alternatives on the local backend (issue 22), `scripts/uneven-bench.sh`:
 *
 * - **equal**: `allToAllV` with every split equal against `allToAll` of the same tensor (each
 *   rank sends `bytes` to every rank; both allocate their output, as `allToAll` always does). The
 *   goal: allToAllV within 1.1x of allToAll.
 * - **skewed**: a mixture-of-experts-like routing where rank `i` sends rank `j` a share that falls
 *   geometrically with `(j - i) mod world` (half of all rows to the first peer, a quarter to the
 *   next, ...), `bytes` per rank on average per peer, against the padded workaround an even
 *   all-to-all needs: every block copied into a buffer padded to the largest block of any pair,
 *   `allToAll`, and the received rows copied out of the padding (allToAllV allocates its output
 *   too, so the workaround's extra cost is the padding and the two copies). Splits are known on both sides
 *   (the count exchange, the same small all-to-all for both, is not timed).
 *
 * Arguments: `WORLD REPEATS BYTES...` (defaults 4, 7, and 4 KiB to 4 MiB). The ranks run on
 * `Dispatchers.Default`, or with the environment variable `DISPATCHER=caller` as coroutines of one
 * thread (`runBlocking`), which leaves out the operating system's scheduling and measures the
 * library's own cost per call. For every size and case,
 * after a discarded pass over every size (JIT warm-up), the two variants alternate for REPEATS rounds; each round times a batch of calls (enough for
 * about 50 ms, after a warm-up batch) between barriers, as rank 0 sees it. Prints one line per
 * size and case: the median microseconds per call of each variant, their min-max over the rounds,
 * and the ratio of the medians.
 */
public object UnevenBenchMain {
    @JvmStatic
    public fun main(args: Array<String>) {
        val world = args.getOrNull(0)?.toInt() ?: 4
        val repeats = args.getOrNull(1)?.toInt() ?: 7
        val sizes = if (args.size > 2) args.drop(2).map { it.toLong() } else listOf(4096L, 65536L, 1L shl 20, 4L shl 20)
        val caller = System.getenv("DISPATCHER") == "caller"
        println(String.format(Locale.ROOT, "# local backend, world %d, %d rounds per point, %d cores, ranks on %s; us per call: median [min-max]",
            world, repeats, Runtime.getRuntime().availableProcessors(), if (caller) "one thread (runBlocking)" else "Dispatchers.Default"))
        println("case     bytes_per_pair   variant            median_us   min_us     max_us     ratio")
        // A discarded pass over every size first: the JIT compiles both paths before any is timed
        // (without it the first point measured ran up to 2x slower than the same point later).
        runBlocking(if (caller) EmptyCoroutineContext else Dispatchers.Default) {
            runLocalWorld(world, CommConfig(worldSize = world)) { comm -> for (bytes in sizes) point(comm, bytes, 1) }
        }
        for (bytes in sizes) {
            val lines = runBlocking(if (caller) EmptyCoroutineContext else Dispatchers.Default) {
                runLocalWorld(world, CommConfig(worldSize = world)) { comm -> point(comm, bytes, repeats) }
            }.first()
            lines.forEach { println(it) }
        }
    }

    private const val COLS = 256 // Float32 elements per row: 1 KiB rows

    /** Rows rank [i] sends rank [j] in the skewed case, for [avg] rows per pair on average. */
    private fun skewed(i: Int, j: Int, world: Int, avg: Int): Int {
        val k = ((j - i) % world + world) % world
        // Shares 1/2, 1/4, ... of world x avg rows; the last peer takes the remainder.
        val total = world * avg
        var left = total
        var share = 0
        for (step in 0..k) {
            share = if (step == world - 1) left else left / 2
            left -= share
        }
        return share
    }

    private suspend fun point(comm: Communicator, bytes: Long, repeats: Int): List<String> {
        val n = comm.worldSize
        val me = comm.rank
        val rows = maxOf(1, (bytes / (COLS * 4)).toInt())
        val rowBytes = COLS * 4L
        val out = ArrayList<String>()

        // Equal: allToAll vs allToAllV with equal splits, same tensors.
        val input = Tensor.zeros(DType.Float32, n * rows, COLS)
        val even = List(n) { rows }
        val equal = compare(comm, repeats,
            "allToAll" to suspend { comm.allToAll(input).close() },
            "allToAllV" to suspend { comm.allToAllV(input, even, even).close() },
        )
        out += line("equal", rows * rowBytes, equal)

        // Skewed: allToAllV vs pad + allToAll + unpad.
        val inSplits = List(n) { skewed(me, it, n, rows) }
        val outSplits = List(n) { skewed(it, me, n, rows) }
        val maxBlock = (0 until n).maxOf { i -> (0 until n).maxOf { j -> skewed(i, j, n, rows) } }
        val sIn = Tensor.zeros(DType.Float32, inSplits.sum(), COLS)
        val sOut = Tensor.zeros(DType.Float32, outSplits.sum(), COLS)
        val padded = Tensor.zeros(DType.Float32, n * maxBlock, COLS)
        val skew = compare(comm, repeats,
            "padded allToAll" to suspend {
                var at = 0L
                for (j in 0 until n) {
                    val len = inSplits[j] * rowBytes
                    MemorySegment.copy(sIn.segment, at, padded.segment, j * maxBlock * rowBytes, len)
                    at += len
                }
                val received = comm.allToAll(padded)
                at = 0L
                for (j in 0 until n) {
                    val len = outSplits[j] * rowBytes
                    MemorySegment.copy(received.segment, j * maxBlock * rowBytes, sOut.segment, at, len)
                    at += len
                }
                received.close()
            },
            "allToAllV" to suspend { comm.allToAllV(sIn, inSplits, outSplits).close() },
        )
        out += line("skewed", rows * rowBytes, skew, "max block ${maxBlock * rowBytes} B")
        return out
    }

    private class Stats(val name: String, val perCallUs: List<Double>) {
        val median: Double get() = perCallUs.sorted().let { s -> if (s.size % 2 == 1) s[s.size / 2] else (s[s.size / 2 - 1] + s[s.size / 2]) / 2 }
    }

    /** Alternates [a] and [b] for [repeats] rounds; returns their per-call times (rank 0's view). */
    private suspend fun compare(comm: Communicator, repeats: Int, a: Pair<String, suspend () -> Unit>, b: Pair<String, suspend () -> Unit>): List<Stats> {
        // Calls per batch: enough for ~50 ms of the slower variant, agreed on by every rank.
        val probe = Tensor.of(longArrayOf(0))
        suspend fun timeBatch(op: suspend () -> Unit, calls: Int): Double {
            comm.barrier()
            val t0 = System.nanoTime()
            repeat(calls) { op() }
            comm.barrier()
            return (System.nanoTime() - t0) / 1e3 / calls
        }
        val oneA = timeBatch(a.second, 3)
        val oneB = timeBatch(b.second, 3)
        probe.setLong(0, maxOf(1L, (50_000.0 / maxOf(oneA, oneB)).toLong()))
        comm.allReduce(probe, dev.tpcomm.ReduceOp.Max)
        val calls = probe.getLong(0).toInt().coerceAtMost(100_000)
        timeBatch(a.second, calls); timeBatch(b.second, calls) // warm-up
        val ta = ArrayList<Double>(); val tb = ArrayList<Double>()
        for (r in 0 until repeats) {
            if (r % 2 == 0) { ta += timeBatch(a.second, calls); tb += timeBatch(b.second, calls) }
            else { tb += timeBatch(b.second, calls); ta += timeBatch(a.second, calls) }
        }
        return listOf(Stats(a.first, ta), Stats(b.first, tb))
    }

    private fun line(case: String, bytesPerPair: Long, s: List<Stats>, note: String = ""): String {
        val (base, v) = s
        fun f(x: Double) = String.format(Locale.ROOT, "%10.1f", x)
        return String.format(Locale.ROOT, "%-8s %-16d %-18s %s %s %s\n%-8s %-16s %-18s %s %s %s %8.3f %s",
            case, bytesPerPair, base.name, f(base.median), f(base.perCallUs.min()), f(base.perCallUs.max()),
            "", "", v.name, f(v.median), f(v.perCallUs.min()), f(v.perCallUs.max()), v.median / base.median, note)
    }
}
