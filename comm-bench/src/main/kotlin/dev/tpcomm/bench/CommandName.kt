package dev.tpcomm.bench

/**
 * The name a command-line program calls itself in its messages and `--help`: the launcher's name
 * when started by one of the binary distribution's launchers (`bin/tpcomm-bench`, `bin/tpcomm-check`
 * pass `-Dtpcomm.command=<their name>`, scripts/dist-lib.sh), else the program's own default.
 */
internal object CommandName {
    /** The launcher's name, or [default] when not started by one. */
    fun of(default: String): String = System.getProperty("tpcomm.command")?.takeIf { it.isNotBlank() } ?: default

    /** [usage] with [scriptName] (the repository script it names) replaced by the launcher's name, when there is one. */
    fun usage(usage: String, scriptName: String): String = usage.replaceFirst(scriptName, of(scriptName))

    /** [message] on one line (a backend's reasons may span several). */
    fun oneLine(message: String?): String = message.orEmpty().lines().map { it.trim() }.filter { it.isNotEmpty() }.joinToString(" ")
}
