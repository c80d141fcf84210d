# Calls the example plug-in tool (guest-tools/word-stats-tool). Run with:
#   agentrt exec examples/programs/plugin_word_stats.py --tool <path to word_stats_tool.wasm>
text = read_section(view_sections(search_pages("Paris")[0]["page_id"])[0]["section_id"])
print(word_count(text), "words")
print(summarize(text))
top_words(text, n=5)
