package dev.tpcomm.examples

import java.io.PrintStream
import java.util.Locale

/**
 * A progress bar on stderr, redrawn in place on a terminal. Off a terminal (logs, pipes) it prints
 * nothing: the demo's loss lines already show the progress there. Not thread-safe.
 */
internal class Progress(private val total: Int, private val label: String, private val out: PrintStream = System.err) {
    private val interactive = System.console()?.isTerminal == true
    private val start = System.nanoTime()

    fun update(done: Int, note: String) {
        val width = 30
        val filled = width * done / total
        val secs = (System.nanoTime() - start) / 1e9
        val line = String.format(Locale.ROOT, "%s [%s%s] %d/%d %.1fs %s", label, "#".repeat(filled), ".".repeat(width - filled), done, total, secs, note)
        if (interactive) {
            out.print("\r" + line.padEnd(90))
            if (done == total) out.println()
        }
        out.flush()
    }

    /** Erases the bar on a terminal so a line printed next starts clean. */
    fun clear() {
        if (interactive) { out.print("\r" + " ".repeat(90) + "\r"); out.flush() }
    }
}
