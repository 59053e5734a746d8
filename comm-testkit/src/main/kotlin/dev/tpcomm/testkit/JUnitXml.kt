package dev.tpcomm.testkit

import java.nio.file.Files
import java.nio.file.Path

/**
 * Writes [results] as a JUnit XML report (the format Surefire writes and CI servers read) to
 * [path], creating its parent folders. Name it `TEST-<suiteName>.xml` inside
 * `target/surefire-reports` to publish multi-process results beside a build's own tests. Each
 * result becomes a `testcase` named `<case> [rank r of n]` whose class name is [suiteName];
 * failures carry their message, skipped cases their reason. Overwrites an existing file.
 */
public fun writeJUnitXml(path: Path, suiteName: String, results: List<CaseResult>) {
    val failures = results.count { it.status == CaseResult.Status.Failed }
    val skipped = results.count { it.status == CaseResult.Status.Skipped }
    val seconds = { ms: Long -> "%.3f".format(java.util.Locale.ROOT, ms / 1000.0) }
    val xml = buildString {
        append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
        append("<testsuite name=\"").append(xmlEscape(suiteName)).append("\" tests=\"").append(results.size)
            .append("\" failures=\"").append(failures).append("\" errors=\"0\" skipped=\"").append(skipped)
            .append("\" time=\"").append(seconds(results.sumOf { it.durationMillis })).append("\">\n")
        for (r in results) {
            append("  <testcase name=\"").append(xmlEscape("${r.case} [rank ${r.rank} of ${r.worldSize}]"))
                .append("\" classname=\"").append(xmlEscape(suiteName)).append("\" time=\"").append(seconds(r.durationMillis)).append('"')
            when (r.status) {
                CaseResult.Status.Passed -> append("/>\n")
                CaseResult.Status.Skipped -> append(">\n    <skipped message=\"").append(xmlEscape(r.message ?: "")).append("\"/>\n  </testcase>\n")
                CaseResult.Status.Failed -> {
                    val message = r.message ?: "failed"
                    append(">\n    <failure message=\"").append(xmlEscape(message.lineSequence().first())).append("\" type=\"AssertionError\">")
                        .append(xmlEscape(message)).append("</failure>\n  </testcase>\n")
                }
            }
        }
        append("</testsuite>\n")
    }
    path.toAbsolutePath().parent?.let { Files.createDirectories(it) }
    Files.writeString(path, xml)
}

/** [text] with XML's special characters escaped and characters XML 1.0 cannot hold replaced. */
internal fun xmlEscape(text: String): String = buildString(text.length) {
    for (c in text) {
        when {
            c == '&' -> append("&amp;")
            c == '<' -> append("&lt;")
            c == '>' -> append("&gt;")
            c == '"' -> append("&quot;")
            c == '\'' -> append("&apos;")
            c == '\n' || c == '\r' || c == '\t' -> append(c)
            c < ' ' || c == '\uFFFE' || c == '\uFFFF' -> append("\\u%04x".format(c.code))
            else -> append(c)
        }
    }
}
