package dev.tpcomm.spi

import dev.tpcomm.DType
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

/**
 * The one encoding of what every rank must agree on for one collective: operation, dtype, shape,
 * reduce op, root, dim and an extra word (the ranks of a `group`), as [SIZE] longs. Backends
 * exchange these words however they move data (an in-process slot, `MPI_Allgather`, `ncclAllGather`)
 * and call [compare] on the gathered words; the message names the ranks and the fields that differ.
 *
 * Layout (version 1): `[0]` [MAGIC], `[1]` operation ([CollectiveOp.ordinal]), `[2]` dtype ordinal
 * or -1, `[3]` reduce-op ordinal ([ReduceOp.ordinal]: the kind only, so ranks passing [ReduceOp.PreMulSum]
 * with different factors agree; [REPRODUCIBLE_OP] plus it for a reproducible reduction) or -1, `[4]` root or -1, `[5]` normalised dim or -1, `[6]` number
 * of dimensions or -1 without a tensor, `[7]` extra (`group`: the ranks' hash; `allGatherV` and
 * `reduceScatterV`: [sizesDigest]; `allToAllV`: [splitsWord]), `[8..15]` the sizes of the first 8 dimensions
 * (a tensor of more dimensions stores a hash of the remaining sizes in `[15]`).
 *
 * Pure functions; thread-safe; [encode] allocates nothing.
 */
@InternalTpcommApi
public object CollectiveSignature {
    /** Number of longs in one rank's signature. */
    public const val SIZE: Int = 16

    /** `"tpcomm"` followed by the layout version (1): a rank speaking another layout is reported as a protocol mismatch. */
    public const val MAGIC: Long = 0x7470636f6d6d0001L

    private const val DIMS_AT = 8
    private const val PRE_MUL_SUM = 8

    /**
     * Word `[3]` of a reproducible reduction's signature (its composite's steps, or the backend's own
     * exact reduction) is this plus the reduce op's ordinal: a rank reducing reproducibly and a peer
     * reducing in the default mode, or reproducibly with another op, differ in `op`.
     */
    public const val REPRODUCIBLE_OP: Long = 64

    /** The `op` word of a reproducible [reduceOp] ([REPRODUCIBLE_OP] plus its ordinal). */
    @JvmStatic
    public fun reproducibleOpWord(reduceOp: ReduceOp): Long = REPRODUCIBLE_OP + reduceOp.ordinal
    private const val MAX_EXACT_DIMS = SIZE - DIMS_AT

    private val FIELD_OF_WORD: Array<String> = arrayOf(
        "protocol", "operation", "dtype", "op", "root", "dim", "shape", "ranks",
        "shape", "shape", "shape", "shape", "shape", "shape", "shape", "shape",
    )

    /**
     * Writes the signature of one call into [dst] at [offset] ([SIZE] longs). [dim] must already be
     * normalised (0 until `tensor.ndim`), or -1 when the operation has none; [root] is -1 when it
     * has none; [extra] is 0 unless the operation defines it.
     */
    @JvmStatic
    public fun encode(
        dst: LongArray,
        offset: Int,
        op: CollectiveOp,
        tensor: Tensor?,
        reduceOp: ReduceOp? = null,
        root: Int = -1,
        dim: Int = -1,
        extra: Long = 0,
    ) {
        encodeShape(dst, offset, op, tensor?.dtype, tensor?.shape, reduceOp, root, dim, extra)
    }

    /**
     * [encode] from a dtype and a shape instead of a tensor (both null for an operation without
     * one). The uneven collectives use it: `allGatherV` encodes its output's shape, `allToAllV` the
     * shape of one row with dim 0 as -1 (each rank's own), both the same on every rank.
     */
    @JvmStatic
    public fun encodeShape(
        dst: LongArray,
        offset: Int,
        op: CollectiveOp,
        dtype: DType?,
        shape: List<Int>?,
        reduceOp: ReduceOp? = null,
        root: Int = -1,
        dim: Int = -1,
        extra: Long = 0,
    ) {
        dst[offset] = MAGIC
        dst[offset + 1] = op.ordinal.toLong()
        dst[offset + 2] = dtype?.ordinal?.toLong() ?: -1L
        dst[offset + 3] = reduceOp?.ordinal?.toLong() ?: -1L
        dst[offset + 4] = root.toLong()
        dst[offset + 5] = dim.toLong()
        dst[offset + 6] = shape?.size?.toLong() ?: -1L
        dst[offset + 7] = extra
        for (i in 0 until MAX_EXACT_DIMS) dst[offset + DIMS_AT + i] = 0L
        if (shape != null) {
            val exact = if (shape.size <= MAX_EXACT_DIMS) shape.size else MAX_EXACT_DIMS - 1
            for (i in 0 until exact) dst[offset + DIMS_AT + i] = shape[i].toLong()
            if (shape.size > MAX_EXACT_DIMS) {
                var h = 1125899906842597L
                for (i in exact until shape.size) h = 31 * h + shape[i]
                dst[offset + SIZE - 1] = h
            }
        }
    }

    /**
     * The extra word of `allGatherV` and `reduceScatterV`: a 64-bit digest of the per-rank [sizes]
     * (in order), equal on two ranks exactly when their lists are (but for a collision, about 2^-64),
     * so ranks that pass different sizes fail the signature check before any data moves.
     */
    @JvmStatic
    public fun sizesDigest(sizes: List<Int>): Long {
        var h = sizes.size.toLong() * -0x61c8864680b583ebL
        for (v in sizes) {
            h = (h xor v.toLong()) * -0x4b47d5b1a5c56c9L
            h = h xor (h ushr 29)
        }
        h = h xor (h ushr 33)
        h *= -0xae502812aa7333L
        h = h xor (h ushr 33)
        return h
    }

    /**
     * The extra word of `allToAllV` on one rank: 0 when, for every peer `j`, [outputSplits]`[j]` (the
     * rows this rank expects from `j`) equals [sentToMe]`[j]` (the rows `j` sends it, its
     * `inputSplits[rank]`), else `j + 1` for the first peer that disagrees. Backends learn
     * [sentToMe] however they move data (the in-process slot sees every rank's splits; MPI exchanges
     * them with one `MPI_Alltoall`) and put this word into the signature, so a disagreement is a
     * signature mismatch naming the ranks that saw it, before any row moves.
     */
    @JvmStatic
    public fun splitsWord(sentToMe: IntArray, outputSplits: List<Int>): Long {
        for (j in sentToMe.indices) if (sentToMe[j] != outputSplits[j]) return (j + 1).toLong()
        return 0L
    }

    /** A new array holding the signature of one call (see [encode]). */
    @JvmStatic
    public fun of(
        op: CollectiveOp,
        tensor: Tensor?,
        reduceOp: ReduceOp? = null,
        root: Int = -1,
        dim: Int = -1,
        extra: Long = 0,
    ): LongArray = LongArray(SIZE).also { encode(it, 0, op, tensor, reduceOp, root, dim, extra) }

    /**
     * A 64-bit digest of the signature at [offset] of [words] ([SIZE] longs), for a cheap agreement
     * check: the ranks exchange digests (the MPI backend all-gathers them in a 64-byte slot per
     * rank) and agree exactly when every digest is the same, so every rank learns of a difference
     * from the same bytes, and only then gathers the full signatures for [compare]'s message.
     * Different signatures collide with probability about 2^-64.
     */
    @JvmStatic
    public fun digest(words: LongArray, offset: Int = 0): Long {
        // Four lanes over words i, i+1, i+2, i+3 (SIZE is a multiple of 4), so that the multiplies of
        // a call's digest overlap instead of forming one chain of SIZE; each step is a bijection of its
        // lane for a given word, and folding the lanes is one in each lane for given others, so a
        // change in any one word changes the digest.
        var a = -0x61c8864680b583ebL // 0x9E3779B97F4A7C15
        var b = 0x632be59bd9b4e019L
        var c = -0x3d4d51c2d82b14b1L
        var d = 0x165667b19e3779f9L
        var i = offset
        val end = offset + SIZE
        while (i < end) {
            a = step(a, words[i]); b = step(b, words[i + 1]); c = step(c, words[i + 2]); d = step(d, words[i + 3])
            i += 4
        }
        var h = step(step(step(a, b), c), d)
        h = h xor (h ushr 33)
        h *= -0xae502812aa7333L // 0xFF51AFD7ED558CCD (MurmurHash3's fmix64)
        h = h xor (h ushr 33)
        return h
    }

    /** One digest step: [h] with [word] mixed in, a bijection of [h] for a given [word] and of [word] for a given [h]. */
    private fun step(h: Long, word: Long): Long {
        val x = (h xor word) * -0x4b47d5b1a5c56c9L // an odd multiplier: a bijection of the 64-bit words
        return x xor (x ushr 29)
    }

    /** What the ranks disagreed on: [message] for the exception, [ranks] that differ from rank 0, the [fields] that differ. */
    public class Mismatch(
        /** The whole message, naming every differing rank, what it called, and the fields. */
        public val message: String,
        /** The ranks whose signature differs from rank 0's, ascending. */
        public val ranks: List<Int>,
        /** The fields that differ (`protocol`, `operation`, `dtype`, `op`, `root`, `dim`, `shape`, `ranks`), in that order. */
        public val fields: List<String>,
    )

    /**
     * Compares the [worldSize] signatures stored one after another in [all] (rank `r` at `r * SIZE`)
     * with rank 0's. Returns null when they all match; otherwise the [Mismatch] for a
     * [dev.tpcomm.CollectiveMismatchException]. [description] names the communicator in the message
     * (for example `"a world of 4 ranks"`). Allocates only on a mismatch.
     */
    @JvmStatic
    public fun compare(all: LongArray, worldSize: Int, sequence: Long, description: String): Mismatch? {
        var bad = false
        outer@ for (r in 1 until worldSize) {
            for (i in 0 until SIZE) if (all[r * SIZE + i] != all[i]) { bad = true; break@outer }
        }
        if (!bad) return null
        val ranks = ArrayList<Int>()
        val fields = LinkedHashSet<String>()
        val lines = StringBuilder()
        for (r in 1 until worldSize) {
            val differs = LinkedHashSet<String>()
            for (i in 0 until SIZE) if (all[r * SIZE + i] != all[i]) differs += fieldOf(all, r * SIZE, i)
            if (differs.isEmpty()) continue
            if ("protocol" in differs || "operation" in differs) differs.retainAll(setOf("protocol", "operation"))
            ranks += r
            fields += differs
            lines.append("; rank ").append(r).append(" called ").append(describe(all, r * SIZE))
                .append(" (differs in ").append(differs.joinToString()).append(')')
        }
        val ordered = listOf("protocol", "operation", "dtype", "op", "root", "dim", "shape", "ranks", "sizes").filter { it in fields }
        val message = "collective #$sequence of $description does not match across ranks: rank 0 called " +
            describe(all, 0) + lines + ". Every rank must call the same collectives in the same order " +
            "with the same dtype, shape, op, root and dim" + (if ("sizes" in fields) " (and, for the uneven collectives, sizes that agree)" else "")
        return Mismatch(message, ranks, ordered)
    }

    /** The field word [i] of the signature at [offset] belongs to: word 7 is `sizes` for the uneven collectives. */
    private fun fieldOf(words: LongArray, offset: Int, i: Int): String {
        if (i == 7) {
            val op = CollectiveOp.entries.getOrNull(words[offset + 1].toInt())
            if (op != null && op.isUneven) return "sizes"
        }
        return FIELD_OF_WORD[i]
    }

    /** Human-readable form of the signature at [offset] of [words], e.g. `allReduce(Float32[4, 8], op=Sum)`. */
    @JvmStatic
    public fun describe(words: LongArray, offset: Int = 0): String {
        if (words[offset] != MAGIC) return "an operation of another tpcomm version (signature word ${words[offset]})"
        val op = CollectiveOp.entries.getOrNull(words[offset + 1].toInt())
        val args = ArrayList<String>()
        val ndim = words[offset + 6].toInt()
        if (ndim >= 0) {
            val dtype = DType.entries.getOrNull(words[offset + 2].toInt())?.name ?: "?"
            val dims = (0 until minOf(ndim, MAX_EXACT_DIMS)).map { words[offset + DIMS_AT + it].let { d -> if (d < 0) "*" else d.toString() } }
            val shape = if (ndim <= MAX_EXACT_DIMS) dims.joinToString() else dims.dropLast(1).joinToString() + ", ..."
            args += "$dtype[$shape]"
        }
        val opWord = words[offset + 3]
        val reproducible = opWord >= REPRODUCIBLE_OP
        val reduceOp = (if (reproducible) opWord - REPRODUCIBLE_OP else opWord).toInt()
        (ReduceOp.entries.getOrNull(reduceOp)?.name ?: if (reduceOp == PRE_MUL_SUM) "PreMulSum" else null)
            ?.let { args += if (reproducible) "op=reproducible $it" else "op=$it" }
        if (words[offset + 4] >= 0) args += "root=${words[offset + 4]}"
        if (words[offset + 5] >= 0) args += "dim=${words[offset + 5]}"
        if (op == CollectiveOp.Group) args += "ranks#${words[offset + 7]}"
        if (op == CollectiveOp.AllGatherV || op == CollectiveOp.ReduceScatterV) args += "sizes#${java.lang.Long.toHexString(words[offset + 7])}"
        if (op == CollectiveOp.AllToAllV && words[offset + 7] != 0L) {
            val peer = words[offset + 7] - 1
            args += "outputSplits[$peer] differs from the rows rank $peer sends it"
        }
        return "${op?.apiName ?: "operation#${words[offset + 1]}"}(${args.joinToString()})"
    }
}
