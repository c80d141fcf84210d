//! Which instruction set the kernels use: detected once, or forced with `AGENTRT_KERNELS`.

use std::fmt;
use std::sync::OnceLock;

/// The environment variable that forces a path (`generic`, `avx2`, `avx512`, `neon`, or `auto`).
pub const KERNELS_ENV: &str = "AGENTRT_KERNELS";

/// Set (to anything) to keep the AVX-512 path off AMX's tiles on a CPU that has them: its kernels then run
/// on VNNI (the same bits; the tiles are only faster).
pub const NO_AMX_ENV: &str = "AGENTRT_NO_AMX";

/// The widest instruction set the kernels may use. Ordered from narrowest to widest within an
/// architecture, so `path >= KernelPath::Avx2` reads "AVX2 or wider".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KernelPath {
    /// Plain Rust for the build target (baseline x86-64 is SSE2; on aarch64 it is already NEON-wide
    /// for the f32 loops, but the int8 kernels stay scalar).
    Generic,
    /// x86-64-v3: AVX2, FMA and F16C (every x86 CPU of the last decade: AMD Zen, Intel since Haswell).
    Avx2,
    /// AVX-512 F, BW, VL and DQ; the int8 kernels also use VNNI, or AMX tiles, where present.
    Avx512,
    /// aarch64 Advanced SIMD (every 64-bit ARM CPU: Graviton, Apple silicon, Ampere).
    Neon,
}

impl KernelPath {
    /// Every path, in the order [`KernelPath::supported`] lists them.
    pub const ALL: [KernelPath; 4] = [KernelPath::Generic, KernelPath::Avx2, KernelPath::Avx512, KernelPath::Neon];

    /// The name `AGENTRT_KERNELS` takes.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Generic => "generic",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512 => "avx512",
            KernelPath::Neon => "neon",
        }
    }

    /// The path a name stands for (`None` for an unknown name; `auto` is handled by [`selected`]).
    pub fn parse(name: &str) -> Option<KernelPath> {
        KernelPath::ALL.into_iter().find(|p| p.name() == name.trim().to_ascii_lowercase())
    }

    /// The CPU features this path needs that this CPU lacks (empty: it can run here).
    pub fn missing_features(self) -> Vec<&'static str> {
        let needed: &[&'static str] = match self {
            KernelPath::Generic => &[],
            KernelPath::Avx2 => &["avx2", "fma", "f16c"],
            KernelPath::Avx512 => &["avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"],
            KernelPath::Neon => &["neon"],
        };
        needed.iter().copied().filter(|f| !has_feature(f)).collect()
    }

    /// True when this CPU can run the path.
    pub fn is_supported(self) -> bool {
        self.missing_features().is_empty()
    }

    /// Every path this CPU can run, `generic` first: what the kernels' tests run.
    pub fn supported() -> Vec<KernelPath> {
        KernelPath::ALL.into_iter().filter(|p| p.is_supported()).collect()
    }

    /// The widest path this CPU can run.
    pub fn best() -> KernelPath {
        *KernelPath::supported().last().expect("the generic path runs everywhere")
    }
}

impl fmt::Display for KernelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The path for `AGENTRT_KERNELS=value` on this CPU, or why it cannot be used.
pub fn resolve(value: Option<&str>) -> Result<KernelPath, String> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty() && *v != "auto") else {
        return Ok(KernelPath::best());
    };
    let path = KernelPath::parse(value).ok_or_else(|| format!("{KERNELS_ENV}={value:?} is not a kernel path; use one of auto, generic, avx2, avx512, neon"))?;
    let missing = path.missing_features();
    if !missing.is_empty() {
        let can: Vec<&str> = KernelPath::supported().iter().map(|p| p.name()).collect();
        return Err(format!("{KERNELS_ENV}={value}: this CPU ({}) lacks {}; it can run {}", cpu_model(), missing.join(", "), can.join(", ")));
    }
    Ok(path)
}

/// The path every kernel uses in this process: `AGENTRT_KERNELS` if set, else the best this CPU runs.
///
/// # Panics
/// When `AGENTRT_KERNELS` names an unknown path or one this CPU cannot run: a forced path is an
/// experiment's setting, and silently running another one would make its numbers lie.
pub fn selected() -> KernelPath {
    static SELECTED: OnceLock<KernelPath> = OnceLock::new();
    *SELECTED.get_or_init(|| {
        let value = std::env::var(KERNELS_ENV).ok();
        resolve(value.as_deref()).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// Whether this CPU has `feature` (a name as `is_x86_feature_detected!` / `is_aarch64_feature_detected!`
/// spell it; unknown names and other architectures' features are false).
pub fn has_feature(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        match feature {
            "sse4.2" => has!("sse4.2"),
            "popcnt" => has!("popcnt"),
            "f16c" => has!("f16c"),
            "avx" => has!("avx"),
            "avx2" => has!("avx2"),
            "fma" => has!("fma"),
            "avx512f" => has!("avx512f"),
            "avx512bw" => has!("avx512bw"),
            "avx512vl" => has!("avx512vl"),
            "avx512dq" => has!("avx512dq"),
            "avx512vnni" => has!("avx512vnni"),
            // The detection macro's AMX names are unstable: CPUID leaf 7, EDX bits 24 and 25.
            "amx-tile" | "amx-int8" => {
                let leaf7 = std::arch::x86_64::__cpuid(0).eax >= 7;
                let bit = if feature == "amx-tile" { 24 } else { 25 };
                leaf7 && std::arch::x86_64::__cpuid_count(7, 0).edx & (1 << bit) != 0
            }
            _ => false,
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        match feature {
            "neon" => has!("neon"),
            "dotprod" => has!("dotprod"),
            "i8mm" => has!("i8mm"),
            "sve" => has!("sve"),
            _ => false,
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = feature;
        false
    }
}

/// True when this CPU has AMX-TILE and AMX-INT8, Linux lets the process use the tile data (asked once,
/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: Linux 5.16 and later grant it on request, for the
/// whole process) and [`NO_AMX_ENV`] is not set. A refusal is not an error: the AVX-512 kernels run on VNNI.
pub fn amx_usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        if std::env::var_os(NO_AMX_ENV).is_some() || !(has_feature("amx-tile") && has_feature("amx-int8")) {
            return false;
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: a plain syscall with integer arguments.
            unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        false
    })
}

/// The SIMD features of this CPU that matter to the kernels, as found at run time.
pub fn cpu_features() -> Vec<&'static str> {
    const NAMES: [&str; 17] = [
        "sse4.2",
        "popcnt",
        "f16c",
        "avx",
        "avx2",
        "fma",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512vnni",
        "amx-tile",
        "amx-int8",
        "neon",
        "dotprod",
        "i8mm",
        "sve",
    ];
    NAMES.into_iter().filter(|f| has_feature(f)).collect()
}

/// The CPU's model name (Linux's `/proc/cpuinfo`), or the architecture when it says none.
pub fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    for key in ["model name", "Model", "CPU part"] {
        if let Some(line) = info.lines().find(|l| l.split(':').next().is_some_and(|k| k.trim() == key)) {
            if let Some((_, v)) = line.split_once(':') {
                return format!("{} ({})", v.trim(), std::env::consts::ARCH);
            }
        }
    }
    format!("unknown {} CPU", std::env::consts::ARCH)
}

/// The CPU and its features, for benchmarks that run no kernel of this crate (the sandbox's).
pub fn cpu_line() -> String {
    format!("cpu: {}; features: {}", cpu_model(), cpu_features().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for p in KernelPath::ALL {
            assert_eq!(KernelPath::parse(p.name()), Some(p));
        }
        assert_eq!(KernelPath::parse(" AVX2 "), Some(KernelPath::Avx2));
        let e = resolve(Some("sse9")).unwrap_err();
        assert!(e.contains("AGENTRT_KERNELS=\"sse9\"") && e.contains("generic, avx2"), "{e}");
    }

    #[test]
    fn auto_is_the_best_supported_path_and_generic_always_runs() {
        assert_eq!(resolve(None).unwrap(), KernelPath::best());
        assert_eq!(resolve(Some("auto")).unwrap(), KernelPath::best());
        assert_eq!(resolve(Some("generic")).unwrap(), KernelPath::Generic);
        assert_eq!(KernelPath::supported()[0], KernelPath::Generic);
        #[cfg(target_arch = "aarch64")]
        assert_eq!(KernelPath::best(), KernelPath::Neon);
    }

    #[test]
    fn a_path_the_cpu_lacks_is_refused_with_what_is_missing() {
        for p in KernelPath::ALL {
            match resolve(Some(p.name())) {
                Ok(got) => assert!(p.is_supported() && got == p),
                Err(e) => {
                    assert!(!p.is_supported());
                    assert!(e.contains("lacks") && e.contains(p.missing_features()[0]), "{e}");
                }
            }
        }
    }

    #[test]
    fn the_description_names_the_cpu_and_the_path() {
        let d = crate::describe();
        eprintln!("{d}");
        assert!(d.starts_with("cpu: ") && d.contains(&format!("kernels: {}", selected())), "{d}");
    }
}
