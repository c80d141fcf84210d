//! docs/your-data.md, run: the walk-through of a corpus of one's own is a script as well as a page
//! ([`crate::walk_through`]); then what the page says the commands give is checked in the files they wrote.

use crate::common::read_json;
use crate::walk_through::run_page;

#[test]
fn the_walk_through_for_your_own_data_runs_as_written() {
    let (dir, ran) = run_page("docs/your-data.md");
    let work = dir.path();
    assert!(ran >= 9, "the page's command blocks were not all found ({ran})");
    let printed = |needle: &str| {
        std::fs::read_dir(work)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".out"))
            .any(|e| std::fs::read_to_string(e.path()).unwrap().contains(needle))
    };
    // Search finds the page that answers; a program reads its section.
    assert!(printed("lavender:pruning") && printed("Prune lavender in late August"), "search and exec");
    // Each evaluation recorded the prompt it sent: the corpus's own, with the plug-in listed where {plugins} was.
    let base = read_json(&work.join("garden/eval/base/results.json"));
    assert!(base["info"]["system_prompt"].as_str().unwrap().starts_with("You answer gardening questions"), "{base}");
    assert_eq!(base["info"]["demonstration"][3][1], "<answer>45 cm</answer>");
    assert_eq!(base["info"]["gold_pages_missing"], 0);
    let with_tool = read_json(&work.join("garden/eval/with-tool/results.json"));
    let prompt = with_tool["info"]["system_prompt"].as_str().unwrap();
    assert!(prompt.contains("- last_frost(region) -> str") && prompt.find("last_frost") < prompt.find("Then reply"), "{prompt}");
    // The trajectories, SFT and RL runs wrote what the page says.
    assert!(std::fs::read_to_string(work.join("garden/synth.jsonl")).unwrap().lines().count() >= 4);
    for f in ["sft/checkpoint-4/agent.json", "rl/checkpoint-2/agent.json", "rl/environment.json", "rl/dev_eval.jsonl", "rl/curves.png"] {
        assert!(work.join("garden/runs").join(f).is_file(), "missing garden/runs/{f}");
    }
    let served = read_json(&work.join("garden/eval/served/results.json"));
    assert_eq!(served["num_questions"], 3);
    // The plug-in answered and its error reached the program.
    assert!(printed("mid May") && printed("caught: last_frost: unknown region"), "the plug-in's calls");
}
