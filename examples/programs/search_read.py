# Search, open the first hit, read its first section: the 3-call program of `agentrt exec`'s docs.
hits = search_pages("Which NFL team won Super Bowl 50?")
page = hits[0]
print(f"top hit: {page['title']} ({page['page_id']}, score {page['score']:.3f})")
sections = view_sections(page["page_id"])
print(read_section(sections[0]["section_id"]))
