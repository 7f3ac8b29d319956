from app import pages

pages.provenance_page()
