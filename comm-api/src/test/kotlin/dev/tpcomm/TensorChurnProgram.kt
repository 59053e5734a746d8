package dev.tpcomm

/**
 * A training loop's allocation pattern as a user writes it, run in its own JVM by [TensorChurnTest]
 * (a small heap, e.g. -Xmx256m): `forget N` allocates N fresh 8-byte tensors and never closes them
 * (the garbage collector must give their memory back); `close N` allocates and closes N.
 * Prints `done <mode> <n> <seconds>` and exits 0 on success.
 */
object TensorChurnProgram {
    @JvmStatic
    fun main(args: Array<String>) {
        val mode = args[0]
        val n = args[1].toLong()
        val start = System.nanoTime()
        var sum = 0L
        for (i in 0 until n) {
            val t = Tensor.zeros(DType.Int64, 1)
            t.setLong(0, i)
            sum += t.getLong(0)
            if (mode == "close") t.close()
        }
        val seconds = (System.nanoTime() - start) / 1e9
        check(sum == n * (n - 1) / 2) { "wrong sum $sum" }
        println("done $mode $n ${"%.2f".format(seconds)}")
    }
}
