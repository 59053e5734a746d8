package dev.tpcomm.coroutines.local

/**
 * Compares the signatures the ranks left in an [OpSlot] (operation, dtype, shape, op, root, dim,
 * group ranks). Run by the last arriver before any data moves. Allocates only on a mismatch.
 */
internal object Signatures {
    class Mismatch(val message: String, val ranks: List<Int>, val fields: List<String>)

    fun compare(s: OpSlot, size: Int, seq: Long, description: String): Mismatch? {
        var bad = false
        for (r in 1 until size) if (!same(s, 0, r)) { bad = true; break }
        if (!bad) return null
        val ranks = ArrayList<Int>()
        val fields = LinkedHashSet<String>()
        val lines = StringBuilder()
        for (r in 1 until size) {
            if (same(s, 0, r)) continue
            ranks.add(r)
            val f = fields(s, 0, r)
            fields.addAll(f)
            lines.append("; rank ").append(r).append(" called ").append(describe(s, r)).append(" (differs in ").append(f.joinToString()).append(')')
        }
        val msg = "collective #$seq of $description does not match across ranks: rank 0 called ${describe(s, 0)}$lines. " +
            "Every rank must call the same collectives in the same order with the same dtype, shape, op, root and dim"
        return Mismatch(msg, ranks, fields.toList())
    }

    private fun same(s: OpSlot, a: Int, b: Int): Boolean {
        val k = s.kinds[a]
        if (s.kinds[b] != k) return false
        if (OpKind.hasTensor(k) && (s.dtypes[a] != s.dtypes[b] || !sameShape(s.shapes[a], s.shapes[b]))) return false
        if (OpKind.hasOp(k) && s.ops[a] != s.ops[b]) return false
        if (OpKind.hasRoot(k) && s.roots[a] != s.roots[b]) return false
        if (OpKind.hasDim(k) && s.dims[a] != s.dims[b]) return false
        if (k == OpKind.GROUP && s.extras[a] != s.extras[b]) return false
        return true
    }

    /** List equality without the iterators `==` allocates (shapes are short random-access lists). */
    private fun sameShape(x: List<Int>?, y: List<Int>?): Boolean {
        if (x === y) return true
        if (x == null || y == null || x.size != y.size) return false
        for (i in x.indices) if (x[i] != y[i]) return false
        return true
    }

    private fun fields(s: OpSlot, a: Int, b: Int): List<String> {
        val k = s.kinds[a]
        if (s.kinds[b] != k) return listOf("operation")
        val out = ArrayList<String>()
        if (OpKind.hasTensor(k) && s.dtypes[a] != s.dtypes[b]) out.add("dtype")
        if (OpKind.hasTensor(k) && s.shapes[a] != s.shapes[b]) out.add("shape")
        if (OpKind.hasOp(k) && s.ops[a] != s.ops[b]) out.add("op")
        if (OpKind.hasRoot(k) && s.roots[a] != s.roots[b]) out.add("root")
        if (OpKind.hasDim(k) && s.dims[a] != s.dims[b]) out.add("dim")
        if (k == OpKind.GROUP && s.extras[a] != s.extras[b]) out.add("ranks")
        return out
    }

    fun describe(s: OpSlot, r: Int): String {
        val k = s.kinds[r]
        val args = ArrayList<String>()
        if (OpKind.hasTensor(k)) args.add("${s.dtypes[r]}${s.shapes[r]}")
        if (OpKind.hasOp(k)) args.add("op=${s.ops[r]}")
        if (OpKind.hasRoot(k)) args.add("root=${s.roots[r]}")
        if (OpKind.hasDim(k)) args.add("dim=${s.dims[r]}")
        if (k == OpKind.GROUP) args.add("ranks=${s.extras[r]}")
        return "${OpKind.name(k)}(${args.joinToString()})"
    }
}
