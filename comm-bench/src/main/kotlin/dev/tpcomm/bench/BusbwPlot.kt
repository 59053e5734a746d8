package dev.tpcomm.bench

import java.awt.BasicStroke
import java.awt.Color
import java.awt.Font
import java.awt.RenderingHints
import java.awt.image.BufferedImage
import java.nio.file.Files
import java.nio.file.Path
import javax.imageio.ImageIO
import kotlin.math.ceil
import kotlin.math.floor
import kotlin.math.log10
import kotlin.math.pow

/**
 * A log-log line plot of bus bandwidth against message size, drawn with Java2D into a PNG (no
 * display needed: runs headless). One line per series, a legend, decade grid lines.
 */
public object BusbwPlot {
    /** One line of the plot: [label] and its (bytes, busbw GB/s) points. */
    public data class Series(val label: String, val points: List<Pair<Long, Double>>)

    private val PALETTE = listOf(
        Color(0x1f, 0x77, 0xb4), Color(0xd6, 0x27, 0x28), Color(0x2c, 0xa0, 0x2c), Color(0xff, 0x7f, 0x0e),
        Color(0x94, 0x67, 0xbd), Color(0x8c, 0x56, 0x4b), Color(0xe3, 0x77, 0xc2), Color(0x7f, 0x7f, 0x7f),
        Color(0xbc, 0xbd, 0x22), Color(0x17, 0xbe, 0xcf), Color(0x00, 0x00, 0x00), Color(0xaa, 0x11, 0x66),
    )

    /**
     * Groups CSV rows into series named `impl, collective, n=world` (points with busbw <= 0 cannot
     * be drawn on a log axis and are left out).
     */
    public fun seriesOf(rows: List<CsvRow>): List<Series> =
        rows.groupBy { Triple(it.impl, it.collective, it.world) }
            .map { (k, v) ->
                Series("${k.first} ${k.second} n=${k.third}", v.sortedBy { it.bytes }.filter { it.busbwGBps > 0 }.map { it.bytes to it.busbwGBps })
            }
            .filter { it.points.isNotEmpty() }

    /**
     * Writes the plot of [series] to [file] (parent folders created), [title] on top.
     *
     * @throws IllegalArgumentException when there is nothing to draw.
     */
    public fun write(file: Path, title: String, series: List<Series>, width: Int = 1100, height: Int = 700) {
        val pts = series.flatMap { it.points }
        require(pts.isNotEmpty()) { "nothing to plot: no point with a positive busbw" }
        System.setProperty("java.awt.headless", "true")
        val img = BufferedImage(width, height, BufferedImage.TYPE_INT_RGB)
        val g = img.createGraphics()
        try {
            g.setRenderingHint(RenderingHints.KEY_ANTIALIASING, RenderingHints.VALUE_ANTIALIAS_ON)
            g.setRenderingHint(RenderingHints.KEY_TEXT_ANTIALIASING, RenderingHints.VALUE_TEXT_ANTIALIAS_ON)
            g.color = Color.WHITE
            g.fillRect(0, 0, width, height)
            val left = 80; val right = 330; val top = 50; val bottom = 70
            val pw = width - left - right; val ph = height - top - bottom

            val xs = pts.map { log2(it.first.toDouble()) }
            val xMin = floor(xs.min()); val xMax = ceil(xs.max()).coerceAtLeast(xMin + 1)
            val ys = pts.map { log10(it.second) }
            val yMin = floor(ys.min()); val yMax = ceil(ys.max()).coerceAtLeast(yMin + 1)
            fun px(bytes: Double) = left + ((log2(bytes) - xMin) / (xMax - xMin) * pw).toInt()
            fun py(gbps: Double) = top + ph - ((log10(gbps) - yMin) / (yMax - yMin) * ph).toInt()

            // Grid and tick labels.
            g.font = Font(Font.SANS_SERIF, Font.PLAIN, 12)
            val fm = g.fontMetrics
            var e = yMin
            while (e <= yMax + 1e-9) {
                val y = py(10.0.pow(e))
                g.color = Color(0xdd, 0xdd, 0xdd); g.drawLine(left, y, left + pw, y)
                g.color = Color.DARK_GRAY
                val lbl = formatDecade(e)
                g.drawString(lbl, left - 8 - fm.stringWidth(lbl), y + 4)
                e += 1.0
            }
            val xStep = if (xMax - xMin > 24) 4 else 2
            var x2 = xMin
            while (x2 <= xMax + 1e-9) {
                val x = px(2.0.pow(x2))
                g.color = Color(0xdd, 0xdd, 0xdd); g.drawLine(x, top, x, top + ph)
                g.color = Color.DARK_GRAY
                val lbl = Sizes.human(2.0.pow(x2).toLong()).replace(" ", "")
                g.drawString(lbl, x - fm.stringWidth(lbl) / 2, top + ph + 18)
                x2 += xStep
            }
            g.color = Color.BLACK
            g.drawRect(left, top, pw, ph)
            g.font = Font(Font.SANS_SERIF, Font.BOLD, 16)
            g.drawString(title, left, 30)
            g.font = Font(Font.SANS_SERIF, Font.PLAIN, 13)
            g.drawString("bytes per rank (log scale)", left + pw / 2 - 80, height - 25)
            val rot = g.transform
            g.rotate(-Math.PI / 2)
            g.drawString("busbw GB/s (log scale)", -(top + ph / 2 + 70), 22)
            g.transform = rot

            // Lines, markers, legend.
            g.font = Font(Font.SANS_SERIF, Font.PLAIN, 12)
            series.forEachIndexed { idx, s ->
                val c = PALETTE[idx % PALETTE.size]
                val dashed = idx >= PALETTE.size
                g.color = c
                g.stroke = if (dashed) BasicStroke(2f, BasicStroke.CAP_ROUND, BasicStroke.JOIN_ROUND, 1f, floatArrayOf(6f, 4f), 0f) else BasicStroke(2f)
                val p = s.points.map { px(it.first.toDouble()) to py(it.second) }
                for (i in 1 until p.size) g.drawLine(p[i - 1].first, p[i - 1].second, p[i].first, p[i].second)
                g.stroke = BasicStroke(1.5f)
                for ((x, y) in p) marker(g, idx / 4 % 3, x, y)
                val ly = top + 10 + idx * 18
                val lx = left + pw + 15
                g.stroke = BasicStroke(2f)
                g.drawLine(lx, ly, lx + 25, ly)
                marker(g, idx / 4 % 3, lx + 12, ly)
                g.color = Color.BLACK
                g.drawString(s.label, lx + 32, ly + 4)
            }
        } finally {
            g.dispose()
        }
        file.toAbsolutePath().parent?.let { Files.createDirectories(it) }
        check(ImageIO.write(img, "png", file.toFile())) { "no PNG writer in this JVM" }
    }

    private fun marker(g: java.awt.Graphics2D, kind: Int, x: Int, y: Int) {
        when (kind) {
            0 -> g.fillOval(x - 3, y - 3, 7, 7)
            1 -> g.fillRect(x - 3, y - 3, 7, 7)
            else -> g.fillPolygon(intArrayOf(x, x - 4, x + 4), intArrayOf(y - 4, y + 3, y + 3), 3)
        }
    }

    private fun log2(v: Double) = Math.log(v) / Math.log(2.0)

    private fun formatDecade(e: Double): String {
        val v = 10.0.pow(e)
        return when {
            v >= 1 -> String.format(java.util.Locale.ROOT, "%.0f", v)
            else -> String.format(java.util.Locale.ROOT, "%.${(-e).toInt()}f", v)
        }
    }
}
