package dev.tpcomm.gpu

import java.lang.classfile.Attributes
import java.lang.classfile.ClassFile

/**
 * **A test fixture** (comm-gpu's test-jar): the annotations a class file carries with binary
 * retention (`RuntimeInvisibleAnnotations`), as descriptors (`Ldev/tpcomm/InternalTpcommApi;`):
 * what the Kotlin compiler reads for an opt-in marker. For comm-nccl's and comm-rccl's checks that
 * their raw native seams need `@InternalTpcommApi`.
 */
object BinaryAnnotations {
    /** The binary-retention annotations of the class [internalName] (`dev/tpcomm/rccl/RcclLibrary`) on the test classpath. */
    fun of(internalName: String): List<String> {
        val bytes = requireNotNull(BinaryAnnotations::class.java.classLoader.getResourceAsStream("$internalName.class")) {
            "no class file $internalName.class on the classpath"
        }.use { it.readAllBytes() }
        return ClassFile.of().parse(bytes).findAttribute(Attributes.runtimeInvisibleAnnotations())
            .map { a -> a.annotations().map { it.className().stringValue() } }
            .orElse(emptyList())
    }
}
