package dev.tpcomm.gpu

import java.nio.file.Files
import java.nio.file.Path

/**
 * An `NCCL_*` parameter as NCCL itself reads it, for the engine's refusals (issue 35, finding 6;
 * docs/nccl-semantics.md N6). Stateless, thread-safe.
 *
 * - **Where from** (NVIDIA/nccl v2.30.7-1 `src/misc/param.cc`, `initEnvFunc`, run once at the first
 *   init): the process environment first; then the file named by `NCCL_CONF_FILE`, or else
 *   `$HOME/.nccl.conf`; then `/etc/nccl.conf`. Each file's `NAME=VALUE` lines (`#` starts a comment
 *   line) are applied with `setenv(name, value, 0)` (`src/os/linux.cc` `ncclOsSetEnv`), so the first
 *   source that sets a name wins.
 * - **How** (`ncclLoadParam`): `strtoll(str, nullptr, 0)`: leading white space, a sign, `0x` for hex,
 *   a leading `0` for octal, and whatever follows the digits ignored; a value out of range keeps the
 *   default.
 */
internal object NcclEnvRead {
    /**
     * The value NCCL would see for [name]: [getEnv] (the process environment as the library reads
     * it), else the configuration files, read with [readFile] (null when a file is absent).
     */
    fun value(name: String, getEnv: (String) -> String?, readFile: (String) -> String? = ::readIfPresent, rccl: Boolean = false): String? {
        getEnv(name)?.let { return it }
        return fromFiles(name, getEnv, readFile, rccl)?.second
    }

    /** The configuration file that sets [name] (as [value] reads them), or null. */
    fun sourceFile(name: String, getEnv: (String) -> String?, readFile: (String) -> String? = ::readIfPresent, rccl: Boolean = false): String? =
        fromFiles(name, getEnv, readFile, rccl)?.first

    /** RCCL 2.21.5 reads `$HOME/.rccl.conf` then `/etc/rccl.conf` and has no `NCCL_CONF_FILE` (ROCm/rccl `src/misc/param.cc` `initEnv`). */
    private fun fromFiles(name: String, getEnv: (String) -> String?, readFile: (String) -> String?, rccl: Boolean): Pair<String, String>? {
        val userFile = if (rccl) null else getEnv("NCCL_CONF_FILE")?.takeIf { it.isNotEmpty() }
        val lib = if (rccl) "rccl" else "nccl"
        val files = buildList {
            if (userFile != null) add(userFile) else getEnv("HOME")?.let { add("$it/.$lib.conf") }
            add("/etc/$lib.conf")
        }
        for (f in files) {
            val text = readFile(f) ?: continue
            for (raw in text.lineSequence()) {
                val line = raw.removeSuffix("\r")
                if (line.startsWith("#")) continue
                val eq = line.indexOf('=')
                if (eq < 0) continue
                if (line.substring(0, eq) == name) return f to line.substring(eq + 1)
            }
        }
        return null
    }

    /** [text] as `strtoll(text, nullptr, 0)` reads it, or null when it has no number (NCCL then keeps the default). */
    fun integer(text: String?): Long? {
        if (text == null) return null
        var i = 0
        while (i < text.length && text[i].isWhitespace()) i++
        var negative = false
        if (i < text.length && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-'
        var radix = 10
        if (i + 1 < text.length && text[i] == '0' && (text[i + 1] == 'x' || text[i + 1] == 'X') &&
            i + 2 < text.length && Character.digit(text[i + 2], 16) >= 0
        ) {
            radix = 16
            i += 2
        } else if (i < text.length && text[i] == '0') {
            radix = 8
        }
        val start = i
        var value = 0L
        while (i < text.length) {
            val d = Character.digit(text[i], radix)
            if (d < 0) break
            value = try {
                Math.addExact(Math.multiplyExact(value, radix.toLong()), d.toLong())
            } catch (_: ArithmeticException) {
                return null // ERANGE: NCCL keeps the default
            }
            i++
        }
        if (i == start) return null
        return if (negative) -value else value
    }

    /** The text of [file], or null when it is absent or unreadable. */
    fun readIfPresent(file: String): String? = try {
        val p = Path.of(file)
        if (Files.isReadable(p)) Files.readString(p) else null
    } catch (_: Exception) {
        null
    }
}
