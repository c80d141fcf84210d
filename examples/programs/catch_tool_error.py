# A tool error is an ordinary exception: catch it and try something else.
try:
    text = read_section("no-such-page:intro")
except Exception as e:
    print("read_section failed:", e)
    hits = search_pages("Super Bowl 50")
    text = read_section(view_sections(hits[0]["page_id"])[0]["section_id"])
print(text[:200])
