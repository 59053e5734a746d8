package dev.tpcomm.bench

import java.nio.file.Files
import java.nio.file.Path

/** One line of the common CSV format `impl,collective,world,bytes,time_us,algbw_GBps,busbw_GBps`. */
public data class CsvRow(
    val impl: String,
    val collective: String,
    val world: Int,
    val bytes: Long,
    val timeUs: Double,
    val algbwGBps: Double,
    val busbwGBps: Double,
) {
    public companion object {
        /** The row of a [BenchResult]. */
        public fun of(r: BenchResult): CsvRow = CsvRow(r.impl, r.op.csvName, r.world, r.bytes, r.timeUs, r.algbwGBps, r.busbwGBps)

        /**
         * Reads [file]: a header naming at least the seven columns (in any order), then one row per
         * line; lines starting with `#` and blank lines are skipped.
         *
         * @throws IllegalArgumentException naming the file and line of a malformed row or a missing column.
         */
        public fun read(file: Path): List<CsvRow> {
            require(Files.isRegularFile(file)) { "CSV file $file does not exist" }
            val lines = Files.readAllLines(file).filter { it.isNotBlank() && !it.startsWith("#") }
            require(lines.isNotEmpty()) { "CSV file $file is empty; it needs the header ${BenchResult.CSV_HEADER}" }
            val cols = lines[0].split(',').map { it.trim() }
            val need = BenchResult.CSV_HEADER.split(',')
            val missing = need.filter { it !in cols }
            require(missing.isEmpty()) { "CSV file $file lacks the column(s) $missing; its header must include ${BenchResult.CSV_HEADER}" }
            val idx = need.map { cols.indexOf(it) }
            return lines.drop(1).mapIndexed { n, line ->
                val f = line.split(',').map { it.trim() }
                try {
                    CsvRow(
                        f[idx[0]], f[idx[1]], f[idx[2]].toInt(), f[idx[3]].toLong(),
                        f[idx[4]].toDouble(), f[idx[5]].toDouble(), f[idx[6]].toDouble(),
                    )
                } catch (e: RuntimeException) {
                    throw IllegalArgumentException("CSV file $file line ${n + 2} is malformed: '$line'", e)
                }
            }
        }
    }
}
