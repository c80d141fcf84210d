# Search, then read the passage that made the first hit match (its `section_id`), and the page's outline.
hits = search_pages("Which NFL team won Super Bowl 50?")
page = hits[0]
print(f"top hit: {page['title']} ({page['page_id']}, score {page['score']:.3f})")
print(read_section(page["section_id"]))
print([s["title"] for s in view_sections(page["page_id"])][:5])
