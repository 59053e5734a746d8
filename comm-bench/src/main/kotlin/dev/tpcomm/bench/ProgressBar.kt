package dev.tpcomm.bench

import java.io.PrintStream

/**
 * A progress bar on stderr: redrawn in place on a terminal, one line per step otherwise (logs).
 * Not thread-safe; call from one coroutine.
 */
public class ProgressBar(
    private val total: Int,
    private val out: PrintStream = System.err,
    private val interactive: Boolean = System.console()?.isTerminal == true,
    private val width: Int = 30,
) {
    private var done = 0
    private val start = System.nanoTime()

    /** Marks one more step done, labelled [what]. */
    public fun step(what: String) {
        done = (done + 1).coerceAtMost(total)
        val elapsed = (System.nanoTime() - start) / 1e9
        val filled = if (total == 0) width else width * done / total
        val bar = "#".repeat(filled) + ".".repeat(width - filled)
        val eta = if (done in 1 until total) ResultTable.fmt(" eta %.0fs", elapsed / done * (total - done)) else ""
        val line = ResultTable.fmt("[%s] %d/%d %.0fs%s %s", bar, done, total, elapsed, eta, what)
        if (interactive) {
            out.print("\r" + line.padEnd(100).take(100))
            if (done == total) out.println()
        } else {
            out.println(line)
        }
        out.flush()
    }

    /** Erases the bar on a terminal, so a table row printed next starts on a clean line. */
    public fun clear() {
        if (interactive && done < total) { out.print("\r" + " ".repeat(100) + "\r"); out.flush() }
    }

    /** Ends the bar's line on a terminal (for an early stop). */
    public fun finish() {
        if (interactive && done < total) out.println()
        out.flush()
    }
}
