package dev.tpcomm.bench

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.ints.shouldBeGreaterThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.nio.file.Files
import javax.imageio.ImageIO

class BusbwPlotTest : FunSpec({
    test("reads the peers' CSV format and writes a PNG with one series per impl and world") {
        val dir = Files.createTempDirectory("plot")
        val csv = dir.resolve("results.csv")
        Files.write(csv, listOf(
            BenchResult.CSV_HEADER,
            "c_mpi,allreduce,4,8,5.05,0.0016,0.0024",
            "c_mpi,allreduce,4,1024,9.19,0.1114,0.1671",
            "c_mpi,allreduce,4,65536,64.2,1.02,1.53",
            "torch_gloo,allreduce,4,8,1149,0.0000,0.0000",
            "torch_gloo,allreduce,4,65536,5457,0.012,0.018",
        ))
        val rows = CsvRow.read(csv)
        rows shouldHaveSize 5
        rows[0] shouldBe CsvRow("c_mpi", "allreduce", 4, 8, 5.05, 0.0016, 0.0024)
        val series = BusbwPlot.seriesOf(rows)
        series shouldHaveSize 2
        series.first { it.label.startsWith("torch_gloo") }.points shouldHaveSize 1  // zero busbw dropped
        val png = dir.resolve("sub/plot.png")
        BusbwPlot.write(png, "test", series)
        val img = ImageIO.read(png.toFile())
        img.width shouldBeGreaterThan 500
        img.height shouldBeGreaterThan 300
    }

    test("nothing to plot is an error") {
        val png = Files.createTempDirectory("plot").resolve("p.png")
        shouldThrow<IllegalArgumentException> { BusbwPlot.write(png, "t", emptyList()) }.message shouldContain "nothing to plot"
    }

    test("bad CSV files name the file and line") {
        val dir = Files.createTempDirectory("csv")
        val noHeader = dir.resolve("a.csv")
        Files.write(noHeader, listOf("impl,collective,world", "x,y,1"))
        shouldThrow<IllegalArgumentException> { CsvRow.read(noHeader) }.message shouldContain "lacks the column"
        val badLine = dir.resolve("b.csv")
        Files.write(badLine, listOf(BenchResult.CSV_HEADER, "c_mpi,allreduce,four,8,1,1,1"))
        shouldThrow<IllegalArgumentException> { CsvRow.read(badLine) }.message shouldContain "line 2"
        shouldThrow<IllegalArgumentException> { CsvRow.read(dir.resolve("missing.csv")) }.message shouldContain "does not exist"
    }
})
