// Prints the public API of a compiled module: every class, constructor, method and field that code
// outside the module can use, as the JVM sees it, minus what Kotlin hides (internal and private
// declarations, read from each class's @kotlin.Metadata with kotlin-metadata-jvm), minus classes and
// functions marked @InternalTpcommApi (tpcomm's modules' own machinery, as kotlinx.coroutines' dumps
// leave kotlinx.coroutines.internal out; properties so marked are still listed) and synthetic
// members. One line per declaration, sorted, so that a change to the public surface is a diff.
// Usage: java -cp <asm.jar>:<kotlin-metadata-jvm.jar>:<kotlin-stdlib.jar> ApiDump.java <classes dir> [<source dir>...]
// A class file left behind by an earlier build (the Kotlin compiler does not delete the output of a
// removed declaration) is not API: it is skipped, with a warning, when its outer class no longer
// declares it or when no file of the given source directories has its source file's name.
// (run by scripts/api-check.sh; the same idea as kotlinx.coroutines' .api files).

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.stream.Stream;
import kotlin.metadata.KmClass;
import kotlin.metadata.KmConstructor;
import kotlin.metadata.KmDeclarationContainer;
import kotlin.metadata.KmFunction;
import kotlin.metadata.KmProperty;
import kotlin.metadata.Attributes;
import kotlin.metadata.Visibility;
import kotlin.metadata.jvm.JvmExtensionsKt;
import kotlin.metadata.jvm.JvmMemberSignature;
import kotlin.metadata.jvm.JvmMetadataUtil;
import kotlin.metadata.jvm.KotlinClassMetadata;
import org.objectweb.asm.AnnotationVisitor;
import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.FieldVisitor;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;

public class ApiDump {
    /** What one class file says: its access, name, supertypes, members and @kotlin.Metadata. */
    static final class Scanned extends ClassVisitor {
        int access;
        String name, superName, outer;
        String[] interfaces;
        boolean innerNonPublic;
        boolean internalApi; // marked @InternalTpcommApi: for tpcomm's own modules, not users (kotlinx.coroutines leaves its .internal out too)
        final List<String[]> methods = new ArrayList<>(); // access, name, descriptor
        final List<String[]> fields = new ArrayList<>();
        Integer k, xi;
        int[] mv;
        String[] d1, d2;
        String xs, pn;
        String sourceFile;
        final Set<String> members = new HashSet<>(); // nested classes this class declares (its InnerClasses entries)

        Scanned() { super(Opcodes.ASM9); }

        @Override public void visitSource(String source, String debug) { sourceFile = source; }

        @Override public void visit(int version, int access, String name, String signature, String superName, String[] interfaces) {
            this.access = access; this.name = name; this.superName = superName; this.interfaces = interfaces;
        }

        @Override public void visitInnerClass(String name, String outer, String inner, int access) {
            // A nested class's effective access is in its InnerClasses entry (private/protected nested classes are public in the class file's own flags).
            if (name.equals(this.name) && (access & (Opcodes.ACC_PUBLIC | Opcodes.ACC_PROTECTED)) == 0) innerNonPublic = true;
            if (name.equals(this.name)) this.outer = outer;
            if (name.equals(this.name) && outer == null && inner == null) innerNonPublic = true; // local or anonymous
            if (this.name.equals(outer)) members.add(name);
        }

        @Override public AnnotationVisitor visitAnnotation(String desc, boolean visible) {
            if (desc.equals(INTERNAL_API)) internalApi = true;
            if (!desc.equals("Lkotlin/Metadata;")) return null;
            return new AnnotationVisitor(Opcodes.ASM9) {
                @Override public void visit(String n, Object v) {
                    switch (n) {
                        case "k" -> k = (Integer) v;
                        case "xi" -> xi = (Integer) v;
                        case "xs" -> xs = (String) v;
                        case "pn" -> pn = (String) v;
                        case "mv" -> mv = (int[]) v;
                        default -> { }
                    }
                }
                @Override public AnnotationVisitor visitArray(String n) {
                    List<String> values = new ArrayList<>();
                    return new AnnotationVisitor(Opcodes.ASM9) {
                        @Override public void visit(String ignored, Object v) { values.add((String) v); }
                        @Override public void visitEnd() {
                            if (n.equals("d1")) d1 = values.toArray(new String[0]);
                            if (n.equals("d2")) d2 = values.toArray(new String[0]);
                        }
                    };
                }
            };
        }

        @Override public FieldVisitor visitField(int access, String name, String desc, String signature, Object value) {
            fields.add(new String[] {Integer.toString(access), name, desc});
            return null;
        }

        @Override public MethodVisitor visitMethod(int access, String name, String desc, String signature, String[] exceptions) {
            String[] m = new String[] {Integer.toString(access), name, desc, ""};
            methods.add(m);
            return new MethodVisitor(Opcodes.ASM9) {
                @Override public AnnotationVisitor visitAnnotation(String d, boolean v) {
                    if (d.equals(INTERNAL_API)) m[3] = "internal";
                    return null;
                }
            };
        }
    }

    /** tpcomm's opt-in marker for what is public across its modules but not for users. */
    static final String INTERNAL_API = "Ldev/tpcomm/InternalTpcommApi;";

    static boolean visible(int access) { return (access & (Opcodes.ACC_PUBLIC | Opcodes.ACC_PROTECTED)) != 0 && (access & Opcodes.ACC_SYNTHETIC) == 0; }

    static boolean exposed(Visibility v) { return v == Visibility.PUBLIC || v == Visibility.PROTECTED; }

    static String flags(int access) {
        StringBuilder b = new StringBuilder((access & Opcodes.ACC_PUBLIC) != 0 ? "public" : "protected");
        if ((access & Opcodes.ACC_STATIC) != 0) b.append(" static");
        if ((access & Opcodes.ACC_FINAL) != 0) b.append(" final");
        if ((access & Opcodes.ACC_ABSTRACT) != 0) b.append(" abstract");
        return b.toString();
    }

    /** JVM signatures (name + descriptor) of the Kotlin declarations of [container] that are not public API. */
    static void hidden(KmDeclarationContainer container, Set<String> hidden) {
        for (KmFunction f : container.getFunctions()) {
            JvmMemberSignature s = JvmExtensionsKt.getSignature(f);
            if (s != null && !exposed(Attributes.getVisibility(f))) hidden.add(s.toString());
        }
        for (KmProperty p : container.getProperties()) {
            boolean show = exposed(Attributes.getVisibility(p));
            JvmMemberSignature g = JvmExtensionsKt.getGetterSignature(p);
            JvmMemberSignature st = JvmExtensionsKt.getSetterSignature(p);
            JvmMemberSignature fl = JvmExtensionsKt.getFieldSignature(p);
            if (!show) {
                if (g != null) hidden.add(g.toString());
                if (st != null) hidden.add(st.toString());
                if (fl != null) hidden.add(fl.getName() + ":" + fl.getDescriptor());
            } else if (p.getSetter() != null && !exposed(Attributes.getVisibility(p.getSetter())) && st != null) {
                hidden.add(st.toString()); // a public property with a private or internal setter
            }
        }
    }

    public static void main(String[] args) throws IOException {
        Path root = Path.of(args[0]);
        List<Path> files;
        try (Stream<Path> s = Files.walk(root)) {
            files = s.filter(p -> p.toString().endsWith(".class") && !p.getFileName().toString().equals("module-info.class")).sorted().toList();
        }
        boolean checkSources = args.length > 1;
        Set<String> sourceNames = new HashSet<>(); // file names of the module's sources
        for (int i = 1; i < args.length; i++) {
            Path dir = Path.of(args[i]);
            if (!Files.isDirectory(dir)) continue;
            try (Stream<Path> s = Files.walk(dir)) {
                s.filter(Files::isRegularFile).forEach(p -> sourceNames.add(p.getFileName().toString()));
            }
        }
        java.util.Map<String, Scanned> scanned = new java.util.LinkedHashMap<>();
        for (Path file : files) {
            Scanned c = new Scanned();
            new ClassReader(Files.readAllBytes(file)).accept(c, ClassReader.SKIP_CODE | ClassReader.SKIP_FRAMES);
            scanned.put(c.name, c);
        }
        Set<String> stale = new HashSet<>();
        for (Scanned c : scanned.values()) {
            String why = null;
            if (c.outer != null) {
                Scanned o = scanned.get(c.outer);
                if (o == null || !o.members.contains(c.name)) why = "its enclosing class " + c.outer + " no longer declares it";
            } else if (checkSources && !c.name.contains("$") && c.sourceFile != null && !sourceNames.contains(c.sourceFile)) {
                why = "no source file is named " + c.sourceFile;
            }
            if (why != null) {
                stale.add(c.name);
                System.err.println("api-check: skipping " + c.name + ".class, left by an earlier build (" + why + "); ./mvnw clean removes it");
            }
        }
        TreeMap<String, TreeSet<String>> out = new TreeMap<>();
        java.util.Map<String, String> heads = new java.util.HashMap<>(); // class name -> its head line, for exposed classes
        java.util.Map<String, String> outers = new java.util.HashMap<>(); // nested class -> enclosing class
        for (Scanned c : scanned.values()) {
            if (stale.contains(c.name)) continue;
            if (c.outer != null) outers.put(c.name, c.outer);
            if (!visible(c.access) || c.innerNonPublic || c.internalApi) continue;
            Set<String> hidden = new HashSet<>();
            boolean kotlinFacade = false;
            if (c.k != null) {
                KotlinClassMetadata md = KotlinClassMetadata.readLenient(JvmMetadataUtil.Metadata(c.k, c.mv, c.d1, c.d2, c.xs, c.pn, c.xi));
                if (md instanceof KotlinClassMetadata.Class cls) {
                    KmClass km = cls.getKmClass();
                    if (!exposed(Attributes.getVisibility(km))) continue;
                    hidden(km, hidden);
                    for (KmConstructor ctor : km.getConstructors()) {
                        JvmMemberSignature s = JvmExtensionsKt.getSignature(ctor);
                        if (s != null && !exposed(Attributes.getVisibility(ctor))) hidden.add(s.toString());
                    }
                } else if (md instanceof KotlinClassMetadata.FileFacade ff) {
                    hidden(ff.getKmPackage(), hidden);
                    kotlinFacade = true;
                } else if (md instanceof KotlinClassMetadata.MultiFileClassPart part) {
                    hidden(part.getKmPackage(), hidden);
                    kotlinFacade = true;
                } else if (md instanceof KotlinClassMetadata.SyntheticClass) {
                    continue; // lambdas, WhenMappings, DefaultImpls of internal things
                }
            }
            TreeSet<String> members = new TreeSet<>();
            for (String[] f : c.fields) {
                int a = Integer.parseInt(f[0]);
                if (!visible(a) || hidden.contains(f[1] + ":" + f[2])) continue;
                members.add("  " + flags(a) + " field " + f[1] + " " + f[2]);
            }
            for (String[] m : c.methods) {
                int a = Integer.parseInt(m[0]);
                if (!visible(a) || (a & Opcodes.ACC_BRIDGE) != 0 || hidden.contains(m[1] + m[2]) || !m[3].isEmpty()) continue;
                if (m[1].contains("$") && !m[1].startsWith("access$")) continue; // internal members are mangled (name$module)
                if (m[1].startsWith("access$")) continue;
                members.add("  " + flags(a) + " " + m[1] + " " + m[2]);
            }
            if (kotlinFacade && members.isEmpty()) continue;
            StringBuilder head = new StringBuilder(flags(c.access & ~Opcodes.ACC_SYNCHRONIZED));
            head.append((c.access & Opcodes.ACC_INTERFACE) != 0 ? " interface " : " class ").append(c.name);
            List<String> supers = new ArrayList<>();
            if (c.superName != null && !c.superName.equals("java/lang/Object")) supers.add(c.superName);
            if (c.interfaces != null) for (String i : c.interfaces) supers.add(i);
            if (!supers.isEmpty()) head.append(" : ").append(String.join(", ", supers));
            out.put(head.toString(), members);
            heads.put(c.name, head.toString());
        }
        // A nested class is API only when every enclosing class is (a public class nested in an internal one is not).
        for (String name : new ArrayList<>(heads.keySet())) {
            for (String o = outers.get(name); o != null; o = outers.get(o)) {
                if (!heads.containsKey(o)) {
                    out.remove(heads.get(name));
                    break;
                }
            }
        }
        StringBuilder b = new StringBuilder();
        for (var e : out.entrySet()) {
            b.append(e.getKey()).append(" {\n");
            for (String m : e.getValue()) b.append(m).append('\n');
            b.append("}\n\n");
        }
        System.out.print(b);
    }
}
